//! Engine KV-cache events: the wire decoder and the per-endpoint ZMQ subscriber that feeds
//! `kthena-sched`'s KV index (`spec/engines-and-peers.md` §5.5).
//!
//! # Wire format
//!
//! Each ZMQ message has three frames: `[topic, seq, payload]`. `seq` is an 8-byte big-endian
//! counter, monotonic per publisher. `payload` is a msgpack `EventBatch`, either an array
//! `[ts, [event, ...], data_parallel_rank?]` or a map `{ts, events, data_parallel_rank}`.
//! Each event is either a positional array tagged by its first element (vLLM before PR
//! #42892, SGLang, TRT-LLM) or a map with a `type` key (vLLM 0.32 and later):
//!
//! | event | array layout | map keys read |
//! |---|---|---|
//! | `BlockStored` | `["BlockStored", hashes, parent, token_ids, block_size, lora_id?, medium?, lora_name?, ...]` | `block_hashes`, `parent_block_hash`, `token_ids`, `block_size`, `lora_id`, `lora_name`, `medium`, `group_idx` |
//! | `BlockRemoved` | `["BlockRemoved", hashes, medium?, ...]` | `block_hashes`, `medium`, `group_idx` |
//! | `AllBlocksCleared` | `["AllBlocksCleared", ...]` | none |
//!
//! Unknown map keys, extra trailing array fields and unknown event types are ignored
//! (unknown types are counted in [`EventBatch::ignored`]). Trailing array fields may be
//! missing (msgspec's `omit_defaults`). A block hash is an integer (unsigned, or signed and
//! taken as its two's-complement bits, as SGLang's Python hashes can be negative) or a byte
//! string (vLLM with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`), folded to its last 8 bytes read
//! big-endian, which is the integer vLLM would have sent.
//!
//! Events the index cannot use are skipped and counted as ignored: blocks of a LoRA adapter
//! (`lora_id` or `lora_name` set; the index hashes token ids only, so they would match base
//! model requests), blocks on a medium other than `GPU` (offload tiers publish the same hashes
//! again), and blocks of a KV-cache group other than 0 (hybrid models).
//!
//! # Sequence numbers
//!
//! [`SeqTracker`] classifies each `seq` against the last one seen from the same publisher:
//! the next value is in order; a larger one is a gap (counted; the missing batches are
//! replayed when the endpoint has a replay address, else the endpoint is marked uncertain);
//! a smaller one is a rollback, which only happens when the engine restarted, so its index
//! entries are cleared before the batch is applied; an equal one is a duplicate and dropped.
//! When the first message seen has a number above 0 (the router joined late) and the engine
//! has a replay address, the earlier batches its buffer still holds are replayed first.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kthena_sched::{EndpointId, KvEvent, KvIndex};
use rmpv::Value;
use tokio_util::sync::CancellationToken;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::error::{Error, Result};
use crate::kv_metrics::KvMetrics;

/// The end-of-replay marker: `-1` as an 8-byte big-endian signed integer.
pub const END_SEQ: [u8; 8] = [0xff; 8];

/// How long a replay request may take before it counts as failed.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);

/// One decoded `EventBatch`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// Publisher timestamp, Unix seconds (0 when absent).
    pub ts: f64,
    /// The usable events, in order.
    pub events: Vec<KvEvent>,
    /// `data_parallel_rank`, when present.
    pub dp_rank: Option<i64>,
    /// Events skipped: unknown types, LoRA blocks, non-GPU media, KV groups other than 0.
    pub ignored: usize,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::KvEventDecode {
        reason: reason.into(),
    }
}

/// Splits a ZMQ message into `(topic, seq, payload)`.
///
/// # Errors
/// [`Error::KvEventDecode`] unless the message has exactly three frames and the second is
/// 8 bytes long.
pub fn split_frames(frames: &[Bytes]) -> Result<(&Bytes, u64, &Bytes)> {
    let [topic, seq, payload] = frames else {
        return Err(bad(format!(
            "expected 3 frames (topic, seq, payload), got {}",
            frames.len()
        )));
    };
    let seq: [u8; 8] = seq[..].try_into().map_err(|_| {
        bad(format!(
            "sequence frame has {} bytes, expected 8",
            seq.len()
        ))
    })?;
    Ok((topic, u64::from_be_bytes(seq), payload))
}

/// Decodes one msgpack `EventBatch` (array or map form, events in array or map form).
///
/// # Errors
/// [`Error::KvEventDecode`] for invalid msgpack, trailing bytes, or a batch or known event
/// whose required fields are missing or of the wrong type.
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch> {
    let mut rd = payload;
    let value =
        rmpv::decode::read_value(&mut rd).map_err(|e| bad(format!("invalid msgpack: {e}")))?;
    if !rd.is_empty() {
        return Err(bad(format!("{} trailing bytes after the batch", rd.len())));
    }
    let (ts, events, rank) = match &value {
        Value::Array(items) => (items.first(), items.get(1), items.get(2)),
        Value::Map(_) => (
            map_get(&value, "ts"),
            map_get(&value, "events"),
            map_get(&value, "data_parallel_rank"),
        ),
        other => {
            return Err(bad(format!(
                "batch is neither an array nor a map: {}",
                kind(other)
            )));
        }
    };
    let ts = match ts {
        None | Some(Value::Nil) => 0.0,
        Some(v) => number(v).ok_or_else(|| bad("batch ts is not a number"))?,
    };
    let Some(Value::Array(raw_events)) = events else {
        return Err(bad("batch has no events list"));
    };
    let dp_rank = rank.and_then(Value::as_i64);
    let mut batch = EventBatch {
        ts,
        events: Vec::with_capacity(raw_events.len()),
        dp_rank,
        ignored: 0,
    };
    for (i, ev) in raw_events.iter().enumerate() {
        match decode_event(ev).map_err(|e| bad(format!("event {i}: {e}")))? {
            Some(e) => batch.events.push(e),
            None => batch.ignored += 1,
        }
    }
    Ok(batch)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "bool",
        Value::Integer(_) => "int",
        Value::F32(_) | Value::F64(_) => "float",
        Value::String(_) => "str",
        Value::Binary(_) => "bin",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Ext(..) => "ext",
    }
}

fn map_get<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::F64(f) => Some(*f),
        Value::F32(f) => Some(f64::from(*f)),
        Value::Integer(i) => i.as_f64(),
        _ => None,
    }
}

/// A block hash as the 64-bit value the index keys on.
fn hash(v: &Value) -> std::result::Result<u64, String> {
    match v {
        Value::Integer(i) => i
            .as_u64()
            .or_else(|| i.as_i64().map(|s| s as u64))
            .ok_or_else(|| "block hash out of range".to_owned()),
        Value::Binary(b) if !b.is_empty() => {
            let mut tail = [0u8; 8];
            let n = b.len().min(8);
            tail[8 - n..].copy_from_slice(&b[b.len() - n..]);
            Ok(u64::from_be_bytes(tail))
        }
        other => Err(format!(
            "block hash is {}, expected int or bytes",
            kind(other)
        )),
    }
}

fn hashes(v: Option<&Value>) -> std::result::Result<Vec<u64>, String> {
    match v {
        Some(Value::Array(items)) => items.iter().map(hash).collect(),
        Some(other) => Err(format!("block_hashes is {}, expected a list", kind(other))),
        None => Err("block_hashes is missing".to_owned()),
    }
}

fn is_set(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_nil())
}

/// Looks a field up by name.
type FieldGetter<'v> = Box<dyn Fn(&str) -> Option<&'v Value> + 'v>;

/// Fields of one event, positional or by name.
struct Fields<'v> {
    tag: &'v str,
    get: FieldGetter<'v>,
}

fn fields(ev: &Value) -> std::result::Result<Fields<'_>, String> {
    match ev {
        Value::Array(items) => {
            let tag = items
                .first()
                .and_then(Value::as_str)
                .ok_or("array event without a type tag")?;
            let layout: &'static [&'static str] = match tag {
                "BlockStored" => &[
                    "",
                    "block_hashes",
                    "parent_block_hash",
                    "token_ids",
                    "block_size",
                    "lora_id",
                    "medium",
                    "lora_name",
                ],
                "BlockRemoved" => &["", "block_hashes", "medium"],
                _ => &[],
            };
            Ok(Fields {
                tag,
                get: Box::new(move |name| {
                    layout
                        .iter()
                        .position(|n| *n == name)
                        .and_then(|i| items.get(i))
                }),
            })
        }
        Value::Map(_) => {
            let tag = map_get(ev, "type")
                .and_then(Value::as_str)
                .ok_or("map event without a string `type`")?;
            Ok(Fields {
                tag,
                get: Box::new(move |name| map_get(ev, name)),
            })
        }
        other => Err(format!(
            "event is {}, expected an array or a map",
            kind(other)
        )),
    }
}

/// Whether an event is about the GPU tier of KV-cache group 0 (the blocks requests reuse).
fn primary_tier(f: &Fields<'_>) -> bool {
    let medium_ok = match (f.get)("medium") {
        None | Some(Value::Nil) => true,
        Some(m) => m.as_str().is_some_and(|m| m.eq_ignore_ascii_case("GPU")),
    };
    let group_ok = (f.get)("group_idx")
        .and_then(Value::as_u64)
        .is_none_or(|g| g == 0);
    medium_ok && group_ok
}

fn decode_event(ev: &Value) -> std::result::Result<Option<KvEvent>, String> {
    let f = fields(ev)?;
    match f.tag {
        "BlockStored" => {
            let block_hashes = hashes((f.get)("block_hashes"))?;
            let parent_block_hash = match (f.get)("parent_block_hash") {
                None | Some(Value::Nil) => None,
                Some(v) => Some(hash(v)?),
            };
            let token_ids = match (f.get)("token_ids") {
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|t| {
                        t.as_u64()
                            .and_then(|t| u32::try_from(t).ok())
                            .ok_or("token id is not a u32")
                    })
                    .collect::<std::result::Result<Vec<u32>, _>>()?,
                _ => return Err("token_ids is missing or not a list".to_owned()),
            };
            let block_size = (f.get)("block_size")
                .and_then(Value::as_u64)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or("block_size is missing or not an unsigned int")?;
            if is_set((f.get)("lora_id")) || is_set((f.get)("lora_name")) || !primary_tier(&f) {
                return Ok(None);
            }
            Ok(Some(KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
            }))
        }
        "BlockRemoved" => {
            let block_hashes = hashes((f.get)("block_hashes"))?;
            if !primary_tier(&f) {
                return Ok(None);
            }
            Ok(Some(KvEvent::BlockRemoved { block_hashes }))
        }
        "AllBlocksCleared" => Ok(Some(KvEvent::AllBlocksCleared)),
        _ => Ok(None),
    }
}

/// The type name of an event (the `type` label of `kthena_router_kv_events_total`).
#[must_use]
pub fn event_type(e: &KvEvent) -> &'static str {
    match e {
        KvEvent::BlockStored { .. } => "BlockStored",
        KvEvent::BlockRemoved { .. } => "BlockRemoved",
        KvEvent::AllBlocksCleared => "AllBlocksCleared",
    }
}

/// How a sequence number relates to the previous one of the same publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStep {
    /// The first message seen: the baseline.
    First,
    /// `last + 1`.
    InOrder,
    /// `last + 1 + missed`: `missed` batches were lost.
    Gap {
        /// The first missing sequence number (`last + 1`).
        from: u64,
        /// How many batches are missing.
        missed: u64,
    },
    /// Equal to the last one: a duplicate, dropped.
    Duplicate,
    /// Smaller than the last one: the publisher restarted.
    Rollback,
}

/// Tracks the sequence numbers of one publisher.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeqTracker {
    last: Option<u64>,
    reconnected: bool,
}

impl SeqTracker {
    /// Classifies `seq` and, unless it is a duplicate, makes it the last one seen.
    pub fn observe(&mut self, seq: u64) -> SeqStep {
        let reconnected = std::mem::take(&mut self.reconnected);
        let step = match self.last {
            None => SeqStep::First,
            Some(last) if seq == last.wrapping_add(1) => SeqStep::InOrder,
            Some(last) if seq > last => SeqStep::Gap {
                from: last + 1,
                missed: seq - last - 1,
            },
            // Across a reconnection the same number comes from a new publisher.
            Some(last) if seq == last && !reconnected => SeqStep::Duplicate,
            Some(_) => SeqStep::Rollback,
        };
        if step != SeqStep::Duplicate {
            self.last = Some(seq);
        }
        step
    }

    /// The connection to the publisher was lost and re-established: if the next number is
    /// not larger than the last one, the publisher restarted (a [`SeqStep::Rollback`], even
    /// when it is equal).
    pub fn reconnected(&mut self) {
        self.reconnected = true;
    }

    /// The last sequence number seen.
    #[must_use]
    pub fn last(&self) -> Option<u64> {
        self.last
    }
}

/// Where one endpoint publishes its KV events.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KvSource {
    /// The scheduler id of the endpoint the events describe.
    pub endpoint: EndpointId,
    /// The PUB address, `tcp://host:port`.
    pub events: String,
    /// The replay (ROUTER) address, `tcp://host:port`, if the engine offers one.
    pub replay: Option<String>,
}

/// The state of one subscription: applies messages to the index and keeps the counters.
#[derive(Debug)]
pub struct Ingest {
    source: KvSource,
    index: Arc<dyn KvIndex>,
    metrics: KvMetrics,
    seq: SeqTracker,
    uncertain: bool,
}

impl Ingest {
    /// A fresh subscription state for `source`, writing into `index`.
    #[must_use]
    pub fn new(source: KvSource, index: Arc<dyn KvIndex>, metrics: KvMetrics) -> Self {
        metrics.set_uncertain(source.endpoint.as_str(), false);
        Self {
            source,
            index,
            metrics,
            seq: SeqTracker::default(),
            uncertain: false,
        }
    }

    /// Whether the endpoint's entries may be incomplete (a gap that was not replayed).
    #[must_use]
    pub fn uncertain(&self) -> bool {
        self.uncertain
    }

    fn set_uncertain(&mut self, on: bool) {
        self.uncertain = on;
        self.metrics
            .set_uncertain(self.source.endpoint.as_str(), on);
    }

    /// Handles one ZMQ message: sequence bookkeeping (replaying a gap when possible), then
    /// decoding and applying its events. Never fails: problems are counted.
    pub async fn handle(&mut self, frames: &[Bytes]) {
        let ep = self.source.endpoint.as_str().to_owned();
        let (seq, payload) = match split_frames(frames) {
            Ok((_, seq, payload)) => (seq, payload.clone()),
            Err(e) => {
                self.metrics.decode_error(&ep);
                tracing::debug!(endpoint = %ep, error = %e, "Dropping a KV-event message");
                return;
            }
        };
        match self.seq.observe(seq) {
            SeqStep::Duplicate => return,
            SeqStep::Rollback => {
                tracing::info!(endpoint = %ep, seq, "KV-event sequence went back: engine restarted, clearing its entries");
                self.metrics.rollback(&ep);
                self.index.remove_endpoint(&self.source.endpoint);
                self.set_uncertain(false);
            }
            SeqStep::Gap { from, missed } => {
                self.metrics.gap(&ep, missed);
                tracing::info!(endpoint = %ep, from, missed, "KV-event sequence gap");
                let replayed = match self.source.replay.clone() {
                    Some(addr) => {
                        let r =
                            tokio::time::timeout(REPLAY_TIMEOUT, replay(&addr, from, seq)).await;
                        match r {
                            Ok(Ok(batches)) if batches.len() as u64 == missed => {
                                for (_, p) in &batches {
                                    self.apply_payload(p);
                                }
                                true
                            }
                            Ok(Ok(batches)) => {
                                tracing::info!(endpoint = %ep, got = batches.len(), missed, "KV-event replay incomplete");
                                false
                            }
                            Ok(Err(e)) => {
                                tracing::info!(endpoint = %ep, error = %e, "KV-event replay failed");
                                false
                            }
                            Err(_) => false,
                        }
                    }
                    None => false,
                };
                if self.source.replay.is_some() {
                    self.metrics.replay(&ep, replayed);
                }
                if !replayed {
                    self.set_uncertain(true);
                }
            }
            SeqStep::First if seq > 0 => {
                // Joined after the engine started: ask for what it published before, as far
                // as its replay buffer reaches (older batches are simply not indexed).
                if let Some(addr) = self.source.replay.clone() {
                    let r = tokio::time::timeout(REPLAY_TIMEOUT, replay(&addr, 0, seq)).await;
                    let ok = matches!(&r, Ok(Ok(_)));
                    if let Ok(Ok(batches)) = r {
                        for (_, p) in &batches {
                            self.apply_payload(p);
                        }
                    }
                    self.metrics.replay(&ep, ok);
                }
            }
            SeqStep::First | SeqStep::InOrder => {}
        }
        self.apply_payload(&payload);
    }

    /// Decodes one payload and applies its events; returns how many were applied.
    pub fn apply_payload(&mut self, payload: &[u8]) -> usize {
        let ep = self.source.endpoint.as_str().to_owned();
        let batch = match decode_batch(payload) {
            Ok(b) => b,
            Err(e) => {
                self.metrics.decode_error(&ep);
                tracing::debug!(endpoint = %ep, error = %e, "Dropping an undecodable KV-event batch");
                return 0;
            }
        };
        let mut applied = 0;
        for ev in &batch.events {
            match self.index.apply(&self.source.endpoint, ev) {
                Ok(()) => {
                    applied += 1;
                    self.metrics.event(&ep, event_type(ev), 1);
                    if matches!(ev, KvEvent::AllBlocksCleared) {
                        self.set_uncertain(false);
                    }
                }
                Err(e) => {
                    self.metrics.rejected(&ep);
                    tracing::debug!(endpoint = %ep, error = %e, "KV index refused an event");
                }
            }
        }
        self.metrics.set_index_entries(self.index.len());
        applied
    }
}

/// Asks a vLLM replay (ROUTER) socket for the batches `from..until` (`until` excluded):
/// sends `["", from as 8 bytes BE]` from a DEALER socket and reads `["", seq, payload]`
/// replies until the `END_SEQ` marker. Returns the batches of that range it got, in order
/// (fewer than asked when the engine's buffer no longer holds them).
///
/// # Errors
/// [`Error::KvEventDecode`] when the socket fails or a reply is malformed.
pub async fn replay(addr: &str, from: u64, until: u64) -> Result<Vec<(u64, Bytes)>> {
    let zerr = |e: zeromq::ZmqError| bad(format!("replay socket {addr}: {e}"));
    let mut sock = zeromq::DealerSocket::new();
    sock.connect(addr).await.map_err(zerr)?;
    let mut req = ZmqMessage::from(Bytes::new());
    req.push_back(Bytes::copy_from_slice(&from.to_be_bytes()));
    sock.send(req).await.map_err(zerr)?;
    let mut out = Vec::new();
    loop {
        let msg = sock.recv().await.map_err(zerr)?.into_vec();
        // Replies are ["", seq, payload]; tolerate a missing empty delimiter.
        let rest = match msg.first() {
            Some(f) if f.is_empty() && msg.len() == 3 => &msg[1..],
            _ => &msg[..],
        };
        let [seq, payload] = rest else {
            return Err(bad(format!("replay reply has {} frames", msg.len())));
        };
        if seq[..] == END_SEQ {
            break;
        }
        let seq: [u8; 8] = seq[..]
            .try_into()
            .map_err(|_| bad("replay sequence frame is not 8 bytes"))?;
        let seq = u64::from_be_bytes(seq);
        if (from..until).contains(&seq) {
            out.push((seq, payload.clone()));
        }
    }
    out.sort_by_key(|(s, _)| *s);
    Ok(out)
}

/// Subscribes to one endpoint's KV events until `cancel` fires: connects (retrying with
/// backoff up to 2 s while the engine is not listening), subscribes to every topic and
/// applies each message. When the engine goes away (the connection drops) the socket is
/// rebuilt the same way, and the next sequence number decides whether the engine restarted
/// (see [`SeqTracker::reconnected`]).
pub async fn subscribe(
    source: KvSource,
    index: Arc<dyn KvIndex>,
    metrics: KvMetrics,
    cancel: CancellationToken,
) {
    let mut ingest = Ingest::new(source.clone(), index, metrics);
    let ep = source.endpoint.as_str().to_owned();
    loop {
        let Some(mut sock) = connect(&source, &cancel).await else {
            return;
        };
        let mut monitor = sock.monitor();
        tracing::info!(endpoint = %ep, address = %source.events, "Subscribed to KV events");
        ingest.metrics.set_subscribed(&ep, true);
        loop {
            let msg = tokio::select! {
                () = cancel.cancelled() => return,
                ev = futures_util::StreamExt::next(&mut monitor) => match ev {
                    Some(zeromq::SocketEvent::Disconnected(_)) | None => break,
                    Some(_) => continue,
                },
                m = sock.recv() => m,
            };
            match msg {
                Ok(m) => {
                    let frames = m.into_vec();
                    if cancel.is_cancelled() {
                        return;
                    }
                    ingest.handle(&frames).await;
                }
                Err(e) => {
                    tracing::debug!(endpoint = %ep, error = %e, "KV-event receive failed; reconnecting");
                    break;
                }
            }
        }
        ingest.metrics.set_subscribed(&ep, false);
        ingest.seq.reconnected();
        tracing::info!(endpoint = %ep, "KV-event publisher disconnected; reconnecting");
    }
}

/// Connects a SUB socket to `source.events` and subscribes to every topic, retrying with
/// backoff (50 ms doubling to 2 s); `None` when cancelled.
async fn connect(source: &KvSource, cancel: &CancellationToken) -> Option<zeromq::SubSocket> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut s = zeromq::SubSocket::new();
        let attempt = async {
            s.connect(&source.events).await?;
            s.subscribe("").await
        };
        tokio::select! {
            () = cancel.cancelled() => return None,
            r = attempt => match r {
                Ok(()) => return Some(s),
                Err(e) => tracing::debug!(endpoint = %source.endpoint, address = %source.events, error = %e, "KV-event connect failed; retrying"),
            },
        }
        tokio::select! {
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::from(v)
    }

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn decodes_array_events_with_missing_and_extra_fields() {
        let stored = Value::Array(vec![
            s("BlockStored"),
            Value::Array(vec![Value::from(1u64), Value::from(-2i64)]),
            Value::Nil,
            Value::Array((0..4u32).map(Value::from).collect()),
            Value::from(2),
        ]);
        let removed = Value::Array(vec![
            s("BlockRemoved"),
            Value::Array(vec![Value::from(u64::MAX)]),
            s("GPU"),
            s("extra"),
        ]);
        let batch = Value::Array(vec![
            Value::F64(1.5),
            Value::Array(vec![stored, removed, Value::Array(vec![s("Fancy")])]),
        ]);
        let b = decode_batch(&enc(&batch)).unwrap();
        assert_eq!(b.ts, 1.5);
        assert_eq!(b.dp_rank, None);
        assert_eq!(b.ignored, 1);
        assert_eq!(
            b.events,
            vec![
                KvEvent::BlockStored {
                    block_hashes: vec![1, (-2i64) as u64],
                    parent_block_hash: None,
                    token_ids: vec![0, 1, 2, 3],
                    block_size: 2
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![u64::MAX]
                },
            ]
        );
    }

    /// SGLang (`sglang/srt/disaggregation/kv_events.py`): msgspec tagged arrays,
    /// `[ts, events, attn_dp_rank]`, no `medium`, possibly negative Python hashes.
    #[test]
    fn decodes_sglang_batch() {
        let batch = Value::Array(vec![
            Value::F64(2.0),
            Value::Array(vec![
                Value::Array(vec![
                    s("BlockStored"),
                    Value::Array(vec![Value::from(-5i64)]),
                    Value::from(-4i64),
                    Value::Array(vec![Value::from(7), Value::from(8)]),
                    Value::from(2),
                    Value::Nil,
                ]),
                Value::Array(vec![
                    s("BlockRemoved"),
                    Value::Array(vec![Value::from(-5i64)]),
                ]),
                Value::Array(vec![s("AllBlocksCleared")]),
            ]),
            Value::from(3),
        ]);
        let b = decode_batch(&enc(&batch)).unwrap();
        assert_eq!(b.dp_rank, Some(3));
        assert_eq!(
            b.events,
            vec![
                KvEvent::BlockStored {
                    block_hashes: vec![(-5i64) as u64],
                    parent_block_hash: Some((-4i64) as u64),
                    token_ids: vec![7, 8],
                    block_size: 2
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![(-5i64) as u64]
                },
                KvEvent::AllBlocksCleared,
            ]
        );
    }

    #[test]
    fn decodes_map_batch_and_byte_hashes() {
        let mut digest = vec![0u8; 24];
        digest.extend_from_slice(&7u64.to_be_bytes());
        let ev = Value::Map(vec![
            (s("type"), s("BlockStored")),
            (s("block_hashes"), Value::Array(vec![Value::Binary(digest)])),
            (s("parent_block_hash"), Value::from(9)),
            (
                s("token_ids"),
                Value::Array(vec![Value::from(5), Value::from(6)]),
            ),
            (s("block_size"), Value::from(2)),
            (s("future_field"), Value::Map(vec![])),
        ]);
        let batch = Value::Map(vec![
            (s("ts"), Value::from(3)),
            (
                s("events"),
                Value::Array(vec![
                    ev,
                    Value::Map(vec![(s("type"), s("AllBlocksCleared"))]),
                ]),
            ),
            (s("data_parallel_rank"), Value::from(1)),
        ]);
        let b = decode_batch(&enc(&batch)).unwrap();
        assert_eq!(b.ts, 3.0);
        assert_eq!(b.dp_rank, Some(1));
        assert_eq!(
            b.events,
            vec![
                KvEvent::BlockStored {
                    block_hashes: vec![7],
                    parent_block_hash: Some(9),
                    token_ids: vec![5, 6],
                    block_size: 2
                },
                KvEvent::AllBlocksCleared
            ]
        );
    }

    #[test]
    fn skips_lora_offload_and_other_groups() {
        let base = |extra: (&str, Value)| {
            Value::Map(vec![
                (s("type"), s("BlockStored")),
                (s("block_hashes"), Value::Array(vec![Value::from(1)])),
                (s("parent_block_hash"), Value::Nil),
                (s("token_ids"), Value::Array(vec![Value::from(1)])),
                (s("block_size"), Value::from(1)),
                (s(extra.0), extra.1),
            ])
        };
        let batch = Value::Array(vec![
            Value::F64(0.0),
            Value::Array(vec![
                base(("lora_name", s("sql"))),
                base(("medium", s("CPU"))),
                base(("group_idx", Value::from(1))),
                base(("medium", s("GPU"))),
            ]),
        ]);
        let b = decode_batch(&enc(&batch)).unwrap();
        assert_eq!((b.events.len(), b.ignored), (1, 3));
    }

    #[test]
    fn rejects_malformed_input() {
        assert!(decode_batch(b"\xc1").is_err());
        assert!(decode_batch(&enc(&Value::from(3))).is_err());
        assert!(decode_batch(&enc(&Value::Array(vec![Value::F64(0.0)]))).is_err());
        let bad_hash = Value::Array(vec![
            Value::F64(0.0),
            Value::Array(vec![Value::Array(vec![
                s("BlockRemoved"),
                Value::Array(vec![s("x")]),
            ])]),
        ]);
        assert!(decode_batch(&enc(&bad_hash)).is_err());
        let mut two = enc(&Value::Array(vec![Value::F64(0.0), Value::Array(vec![])]));
        two.push(0xc0);
        assert!(decode_batch(&two).is_err());
        assert!(split_frames(&[Bytes::new(), Bytes::from_static(b"1234567")]).is_err());
        assert!(
            split_frames(&[Bytes::new(), Bytes::from_static(b"1234567"), Bytes::new()]).is_err()
        );
        let f = [
            Bytes::from_static(b"t"),
            Bytes::copy_from_slice(&5u64.to_be_bytes()),
            Bytes::from_static(b"p"),
        ];
        assert_eq!(split_frames(&f).unwrap().1, 5);
    }

    #[test]
    fn sequence_steps() {
        let mut t = SeqTracker::default();
        assert_eq!(t.observe(4), SeqStep::First);
        assert_eq!(t.observe(5), SeqStep::InOrder);
        assert_eq!(t.observe(5), SeqStep::Duplicate);
        assert_eq!(t.observe(9), SeqStep::Gap { from: 6, missed: 3 });
        assert_eq!(t.observe(0), SeqStep::Rollback);
        assert_eq!(t.observe(1), SeqStep::InOrder);
        assert_eq!(t.last(), Some(1));
        t.reconnected();
        assert_eq!(t.observe(1), SeqStep::Rollback);
        assert_eq!(t.observe(1), SeqStep::Duplicate);
    }
}
