//! KV events over ZMQ PUB in vLLM's wire format (`vllm-project/vllm`
//! `vllm/distributed/kv_events.py`).
//!
//! Each message has three frames: the topic, the sequence number as 8 bytes big-endian
//! (0, 1, 2, ... per publisher, gap-free; vLLM counts batches even when no subscriber is
//! connected), and a msgpack `EventBatch` `[ts, [event, ...], data_parallel_rank]` with `ts` in
//! Unix seconds (float) and rank 0, as in the captured vLLM 0.32 frame. Events are either maps
//! with a `"type"` key (vLLM 0.32) or positional arrays (older vLLM, SGLang):
//!
//! | event | map keys | array layout |
//! |---|---|---|
//! | BlockStored | type, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind | `["BlockStored", hashes, parent, token_ids, block_size, lora_id, medium, lora_name]` |
//! | BlockRemoved | type, block_hashes, medium, group_idx | `["BlockRemoved", hashes, medium]` |
//! | AllBlocksCleared | type | `["AllBlocksCleared"]` |
//!
//! With a replay socket ([`replay`]), the last `buffer_steps` batches are kept and resent on
//! request, as vLLM's `ZmqEventPublisher` does.
//!
//! The encoding itself is the `kthena-kvevents` crate's ([`EventBatch::encode`]); this module
//! maps the cache's events to it and publishes them.
//!
//! Block hashes are unsigned 64-bit integers, the digest's low 64 bits (vLLM's default,
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`), or the digest bytes as msgpack `bin` when
//! `int_hashes` is false. `extra_keys` has one entry per block: nil, or the block's hash extra
//! keys as an array (a LoRA name or cache salt as a string, a multimodal item as
//! `[identifier, offset]`).

use bytes::Bytes;
use kthena_kvevents::{BlockRemoved, BlockStored, Encoding, Event, EventBatch};
use tokio::sync::mpsc;
use zeromq::{Socket, SocketSend, ZmqMessage};

use crate::config::KvEventsFormat;
use crate::hash::{BlockHash, ExtraKey};
use crate::kv::KvEvent;
use crate::{Error, Result};

mod replay;

pub(crate) use replay::ReplaySocket;
use replay::{ReplayBuffer, ReplayRequest};

fn hash(h: &BlockHash, int_hashes: bool) -> kthena_kvevents::BlockHash {
    if int_hashes {
        kthena_kvevents::BlockHash::Int(h.to_u64())
    } else {
        kthena_kvevents::BlockHash::Bytes(h.as_bytes().to_vec())
    }
}

fn extra_key(k: &ExtraKey) -> kthena_kvevents::ExtraKey {
    match k {
        ExtraKey::Str(s) => kthena_kvevents::ExtraKey::Str(s.clone()),
        ExtraKey::Mm { identifier, offset } => kthena_kvevents::ExtraKey::Mm {
            identifier: identifier.clone(),
            offset: *offset,
        },
        ExtraKey::Bytes(b) => kthena_kvevents::ExtraKey::Bytes(b.clone()),
    }
}

/// One event in vLLM's terms: tier `GPU`, and in the map form (vLLM 0.32) the fields vLLM
/// 0.32 adds (`extra_keys`, `group_idx` 0, `kv_cache_spec_kind` `full_attention`), with int
/// block hashes if `int_hashes`, else the digest bytes.
#[must_use]
pub fn wire_event(ev: &KvEvent, format: KvEventsFormat, int_hashes: bool) -> Event {
    let map = format == KvEventsFormat::Map;
    let hashes = |h: &[BlockHash]| h.iter().map(|x| hash(x, int_hashes)).collect();
    match ev {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            lora_name,
            extra_keys,
        } => Event::BlockStored(BlockStored {
            block_hashes: hashes(block_hashes),
            parent_block_hash: parent_block_hash.as_ref().map(|h| hash(h, int_hashes)),
            token_ids: token_ids.clone(),
            block_size: *block_size,
            lora_id: None,
            medium: Some("GPU".to_owned()),
            lora_name: lora_name.clone(),
            extra_keys: map.then(|| {
                extra_keys
                    .iter()
                    .map(|k| k.iter().map(extra_key).collect())
                    .collect()
            }),
            group_idx: map.then_some(0),
            kv_cache_spec_kind: map.then(|| "full_attention".to_owned()),
            kv_cache_spec_sliding_window: None,
        }),
        KvEvent::BlockRemoved { block_hashes } => Event::BlockRemoved(BlockRemoved {
            block_hashes: hashes(block_hashes),
            medium: Some("GPU".to_owned()),
            group_idx: map.then_some(0),
        }),
        KvEvent::AllBlocksCleared => Event::AllBlocksCleared,
    }
}

/// Encodes one batch `[ts, [events], 0]` as msgpack bytes (events as in [`wire_event`]),
/// `ts` in Unix seconds.
#[must_use]
pub fn encode_batch(
    ts: f64,
    events: &[KvEvent],
    format: KvEventsFormat,
    int_hashes: bool,
) -> Vec<u8> {
    let batch = EventBatch {
        ts,
        events: events
            .iter()
            .map(|e| wire_event(e, format, int_hashes))
            .collect(),
        data_parallel_rank: Some(0),
    };
    batch.encode(match format {
        KvEventsFormat::Map => Encoding::VllmMap,
        KvEventsFormat::Array => Encoding::VllmArray,
    })
}

/// The ZMQ endpoint text of a publisher at `ip:port` (`tcp://10.0.0.1:5557`,
/// `tcp://[::1]:5557`), the form a router's `kvEvents` address takes.
pub(crate) fn endpoint(ip: std::net::IpAddr, port: u16) -> String {
    match ip {
        std::net::IpAddr::V4(a) => format!("tcp://{a}:{port}"),
        std::net::IpAddr::V6(a) => format!("tcp://[{a}]:{port}"),
    }
}

/// Where published batches go.
enum Sink {
    /// A bound ZMQ PUB socket.
    Zmq(zeromq::PubSocket),
    /// A topic of an in-memory network (`kthena_sim::spawn_in_memory`).
    Memory(kthena_memnet::Publisher),
}

/// A KV-event publisher: a bound PUB socket or an in-memory topic, and optionally a replay
/// socket with its buffer.
pub(crate) struct Publisher {
    socket: Sink,
    topic: Bytes,
    format: KvEventsFormat,
    int_hashes: bool,
    seq: u64,
    replay: Option<(ReplaySocket, ReplayBuffer)>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("topic", &self.topic)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Binds `tcp://host:port`; returns the publisher and the bound port.
    pub(crate) async fn bind(
        host: std::net::IpAddr,
        port: u16,
        topic: String,
        format: KvEventsFormat,
        int_hashes: bool,
    ) -> Result<(Self, u16)> {
        let endpoint = endpoint(host, port);
        let mut socket = zeromq::PubSocket::new();
        let bound = socket
            .bind(&endpoint)
            .await
            .map_err(|source| Error::KvEvents {
                endpoint: endpoint.clone(),
                source,
            })?;
        let port = match bound {
            zeromq::Endpoint::Tcp(_, p) => p,
            _ => port,
        };
        Ok((
            Self {
                socket: Sink::Zmq(socket),
                topic: Bytes::from(topic),
                format,
                int_hashes,
                seq: 0,
                replay: None,
            },
            port,
        ))
    }

    /// A publisher on an in-memory topic, with ZMQ's three frames per message.
    pub(crate) fn memory(
        publisher: kthena_memnet::Publisher,
        topic: String,
        format: KvEventsFormat,
        int_hashes: bool,
    ) -> Self {
        Self {
            socket: Sink::Memory(publisher),
            topic: Bytes::from(topic),
            format,
            int_hashes,
            seq: 0,
            replay: None,
        }
    }

    /// Serves replay requests on `socket` from a buffer of the last `buffer_steps` batches.
    pub(crate) fn with_replay(mut self, socket: ReplaySocket, buffer_steps: usize) -> Self {
        self.replay = Some((socket, ReplayBuffer::new(buffer_steps)));
        self
    }

    /// Publishes batches until the channel closes, answering replay requests in between.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Vec<KvEvent>>) {
        loop {
            tokio::select! {
                events = rx.recv() => match events {
                    Some(events) => self.publish(&events).await,
                    None => return,
                },
                request = next_request(self.replay.as_mut().map(|(s, _)| s)) => {
                    match (request, self.replay.as_mut()) {
                        (Some(request), Some((socket, buffer))) => {
                            socket.answer(request, buffer).await;
                        }
                        // The replay socket closed: publish on without it.
                        _ => self.replay = None,
                    }
                }
            }
        }
    }

    /// Publishes one batch (and keeps it for replay).
    async fn publish(&mut self, events: &[KvEvent]) {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let payload = Bytes::from(encode_batch(ts, events, self.format, self.int_hashes));
        if let Some((_, buffer)) = &mut self.replay {
            buffer.push(self.seq, payload.clone());
        }
        let frames = [
            self.topic.clone(),
            Bytes::copy_from_slice(&self.seq.to_be_bytes()),
            payload,
        ];
        self.seq += 1;
        match &mut self.socket {
            Sink::Memory(p) => {
                p.send(&frames);
            }
            Sink::Zmq(socket) => {
                let [topic, seq, payload] = frames;
                let mut msg = ZmqMessage::from(topic);
                msg.push_back(seq);
                msg.push_back(payload);
                if let Err(e) = socket.send(msg).await {
                    tracing::warn!(error = %e, "Dropping a KV-event batch.");
                }
            }
        }
    }
}

/// The next request of `socket`; pending for ever without one.
async fn next_request(socket: Option<&mut ReplaySocket>) -> Option<ReplayRequest> {
    match socket {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
