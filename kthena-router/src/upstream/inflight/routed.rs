//! Routing decisions shared between router replicas, so that a prompt placed by one replica
//! is placed next to it by the others before the engine has announced its blocks.
//!
//! A decision is what `kvcache-aware` records in its own index when a request is sent: the
//! endpoint, the model and the hashes of the prompt's full blocks ([`Decision`]). The other
//! replicas record it as a provisional entry ([`kthena_sched::KvIndex::record_routed`]) at
//! their next refresh of the shared in-flight counts. Two carriers: the in-process board
//! (`board`) and, for replicas that share through Redis, the stream [`ROUTED_STREAM`]
//! ([`RedisRouted`]): `XADD` (capped at about [`STREAM_MAX_LEN`] entries) in the same round trip
//! as the request's `HINCRBY`, `XREAD` from the last entry read in the same round trip as the
//! refresh's `HMGET`.

use std::sync::{Mutex, PoisonError};

use kthena_sched::{EndpointId, KvQuery, Request};

use crate::kv::cache::KvState;

/// The Redis stream of routing decisions.
pub(crate) const ROUTED_STREAM: &str = "kthena:routed-decisions";

/// About how many decisions the stream keeps (`XADD MAXLEN ~`): far more than the replicas
/// append between two refreshes.
pub(crate) const STREAM_MAX_LEN: usize = 10_000;

/// Most decisions one refresh reads.
const READ_COUNT: usize = 2_000;

/// One routing decision (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) endpoint: EndpointId,
    pub(crate) model: String,
    /// Tokens per block.
    pub(crate) block_size: usize,
    /// The chained hashes of the prompt's full blocks.
    pub(crate) blocks: Vec<u64>,
}

impl Decision {
    /// The decision of sending `req` to `endpoint`, as `kvcache-aware` records it; `None`
    /// without a KV index, token ids or a full block.
    pub(crate) fn of(kv: &KvState, endpoint: &EndpointId, req: &Request<'_>) -> Option<Self> {
        let (Some(_), Some(tokens)) = (&kv.index, req.token_ids) else {
            return None;
        };
        let (block_size, max_blocks) = (kv.args.block_size_to_hash, kv.args.max_blocks_to_match);
        let mut blocks = Vec::new();
        kthena_sched::token_block_hashes(tokens, block_size, max_blocks, &mut blocks);
        blocks.truncate(tokens.len() / block_size.max(1));
        (!blocks.is_empty()).then(|| Self {
            endpoint: endpoint.clone(),
            model: req.model.to_owned(),
            block_size,
            blocks,
        })
    }

    /// Records the decision in `kv`'s index as a provisional entry.
    pub(crate) fn record(&self, kv: &KvState) {
        let Some(index) = &kv.index else { return };
        let zeros = vec![0u32; self.blocks.len() * self.block_size];
        index.record_routed(
            &self.endpoint,
            &KvQuery {
                model: &self.model,
                token_ids: &zeros,
                block_size: self.block_size,
                block_hashes: &self.blocks,
            },
        );
    }
}

/// One replica's side of the Redis stream: its id, the decisions not yet appended, and the
/// id of the last entry read.
#[derive(Debug)]
pub(crate) struct RedisRouted {
    me: String,
    pending: Mutex<Vec<Decision>>,
    last_id: Mutex<String>,
}

impl RedisRouted {
    /// A replica that reads the entries after `last_id` (`0-0` for all of them).
    pub(crate) fn new(last_id: String) -> Self {
        Self {
            me: format!("{:016x}", rand::random::<u64>()),
            pending: Mutex::new(Vec::new()),
            last_id: Mutex::new(last_id),
        }
    }

    /// Queues `d` for the next round trip.
    pub(crate) fn push(&self, d: Decision) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(d);
    }

    /// Adds an `XADD` per queued decision to `pipe` (their replies ignored).
    pub(crate) fn append_to(&self, pipe: &mut redis::Pipeline) {
        let pending =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        for d in pending {
            let blocks: Vec<u8> = d.blocks.iter().flat_map(|b| b.to_le_bytes()).collect();
            pipe.cmd("XADD")
                .arg(ROUTED_STREAM)
                .arg("MAXLEN")
                .arg("~")
                .arg(STREAM_MAX_LEN)
                .arg("*")
                .arg("from")
                .arg(&self.me)
                .arg("endpoint")
                .arg(d.endpoint.as_str())
                .arg("model")
                .arg(&d.model)
                .arg("blockSize")
                .arg(d.block_size)
                .arg("blocks")
                .arg(blocks)
                .ignore();
        }
    }

    /// Adds the `XREAD` of the entries after the last one read to `pipe`.
    pub(crate) fn read_to(&self, pipe: &mut redis::Pipeline) {
        let last = self
            .last_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        pipe.cmd("XREAD")
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("STREAMS")
            .arg(ROUTED_STREAM)
            .arg(last);
    }

    /// Records the other replicas' decisions of an `XREAD` reply in `kv`'s index and
    /// remembers the last entry read.
    pub(crate) fn apply(&self, reply: &redis::streams::StreamReadReply, kv: &KvState) {
        for key in &reply.keys {
            for entry in &key.ids {
                if entry.get::<String>("from").as_deref() != Some(self.me.as_str())
                    && let Some(d) = decode(entry)
                {
                    d.record(kv);
                }
                *self.last_id.lock().unwrap_or_else(PoisonError::into_inner) = entry.id.clone();
            }
        }
    }
}

/// A decision from a stream entry; `None` when a field is missing or malformed.
fn decode(entry: &redis::streams::StreamId) -> Option<Decision> {
    let blocks: Vec<u8> = entry.get("blocks")?;
    if !blocks.len().is_multiple_of(8) {
        return None;
    }
    Some(Decision {
        endpoint: EndpointId::new(entry.get::<String>("endpoint")?),
        model: entry.get("model")?,
        block_size: entry.get("blockSize")?,
        blocks: blocks
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect(),
    })
}
