//! Engine KV-cache events: the per-endpoint ZMQ subscriber that feeds `kthena-sched`'s KV
//! index (vLLM's publisher: `vllm-project/vllm` `vllm/distributed/kv_events.py`).
//!
//! The wire format (frames, msgpack batches in vLLM's array and map forms and SGLang's, the
//! events an index can use) lives in the `kthena-kvevents` crate; this module is the
//! transport: SUB sockets, replay requests and the bookkeeping of sequence numbers.
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
use kthena_kvevents::{END_SEQ, SeqStep, SeqTracker, decode_batch, event_type, split_frames};
use kthena_sched::{EndpointId, KvEvent, KvIndex};
use tokio_util::sync::CancellationToken;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::error::{Error, Result};
use crate::kv::metrics::KvMetrics;

/// How long a replay request may take before it counts as failed.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);

fn bad(reason: impl Into<String>) -> Error {
    Error::KvEventDecode {
        reason: reason.into(),
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
        metrics.subscription_started(
            source.endpoint.as_str(),
            &source.events,
            source.replay.as_deref(),
        );
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
        self.metrics.batch(&ep, seq);
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

impl kthena_kvevents::Subscriber for Ingest {
    fn message(&mut self, frames: &[Bytes]) -> impl Future<Output = ()> + Send {
        self.handle(frames)
    }

    /// Publishes the subscription state; a new connection may follow an engine restart, so
    /// the sequence tracker is told.
    fn connected(&mut self, on: bool) {
        self.metrics
            .set_subscribed(self.source.endpoint.as_str(), on);
        if !on {
            self.seq.reconnected();
        }
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
/// (see [`SeqTracker::reconnected`]). The socket loop is `kthena_kvevents::subscribe`.
pub async fn subscribe(
    source: KvSource,
    index: Arc<dyn KvIndex>,
    metrics: KvMetrics,
    cancel: CancellationToken,
) {
    let mut ingest = Ingest::new(source.clone(), index, metrics);
    kthena_kvevents::subscribe(
        source.endpoint.as_str(),
        &source.events,
        &mut ingest,
        &cancel,
    )
    .await;
}

/// [`subscribe`] on an in-memory network: reads `source.events`'s topic on `net` until
/// `cancel` fires (see `Router::start_in_memory`).
pub(crate) async fn subscribe_memory(
    source: KvSource,
    index: Arc<dyn KvIndex>,
    metrics: KvMetrics,
    net: kthena_memnet::MemNet,
    cancel: CancellationToken,
) {
    let mut sub = net.subscribe(&source.events);
    let ep = source.endpoint.as_str().to_owned();
    let mut ingest = Ingest::new(source, index, metrics);
    ingest.metrics.set_subscribed(&ep, true);
    loop {
        let frames = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            m = sub.recv() => m,
        };
        let Some(frames) = frames else {
            return;
        };
        ingest.handle(&frames).await;
    }
}
