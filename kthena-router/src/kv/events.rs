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
//!
//! # Catching up at start
//!
//! A subscription to an engine with a replay address first asks it for everything its buffer
//! holds ([`Ingest::catch_up`], from sequence 0), before any live message: a router started
//! (or restarted) while the engines already hold cached prefixes knows them before it routes
//! its first request, not only after each engine's next batch. The replayed numbers seed the
//! sequence tracker, so live batches the replay already returned are dropped as duplicates
//! and batches published between the replay and the subscription are a gap, replayed in
//! turn. The replay comes from the engine itself (vLLM's replay socket, the in-memory
//! network's request/reply endpoint in virtual-time runs), not from another router replica:
//! the engine is the source of truth, replicas need no protocol between them, and the first
//! router gains as much as a restarted one; only the batches still in the engine's buffer
//! (vLLM's `buffer_steps`, 10,000 by default) come back.

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

/// How replay requests reach an engine.
#[derive(Debug, Clone, Default)]
enum Transport {
    /// A ZMQ DEALER socket ([`replay`]).
    #[default]
    Zmq,
    /// A request/reply endpoint of an in-memory network (`Router::start_in_memory`).
    Memory(kthena_memnet::MemNet),
}

/// The state of one subscription: applies messages to the index and keeps the counters.
#[derive(Debug)]
pub struct Ingest {
    source: KvSource,
    index: Arc<dyn KvIndex>,
    metrics: KvMetrics,
    seq: SeqTracker,
    uncertain: bool,
    transport: Transport,
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
            transport: Transport::Zmq,
        }
    }

    /// Asks the engine's replay socket for `from..until` over this subscription's transport,
    /// within [`REPLAY_TIMEOUT`].
    async fn fetch(&self, addr: &str, from: u64, until: u64) -> Result<Vec<(u64, Bytes)>> {
        let request = async {
            match &self.transport {
                Transport::Zmq => replay(addr, from, until).await,
                Transport::Memory(net) => replay_memory(net, addr, from, until).await,
            }
        };
        tokio::time::timeout(REPLAY_TIMEOUT, request)
            .await
            .map_err(|_| {
                bad(format!(
                    "replay socket {addr}: no answer within {REPLAY_TIMEOUT:?}"
                ))
            })?
    }

    /// Before the first live message: replays every batch the engine's buffer holds (from
    /// sequence 0) and seeds the sequence tracker with their numbers. Does nothing without
    /// a replay address or once a message was seen. A failure (the engine not up yet) is
    /// logged and not counted: the first live message asks again when it shows the router
    /// joined late.
    pub async fn catch_up(&mut self) {
        let Some(addr) = self.source.replay.clone() else {
            return;
        };
        if self.seq.last().is_some() {
            return;
        }
        let ep = self.source.endpoint.as_str().to_owned();
        match self.fetch(&addr, 0, u64::MAX).await {
            Ok(batches) => {
                for (seq, p) in &batches {
                    self.seq.observe(*seq);
                    self.apply_payload(p);
                }
                self.metrics.replay(&ep, true);
                tracing::debug!(endpoint = %ep, batches = batches.len(), "KV-event replay at start");
            }
            Err(e) => {
                tracing::debug!(endpoint = %ep, error = %e, "KV-event replay at start failed");
            }
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
                    Some(addr) => match self.fetch(&addr, from, seq).await {
                        Ok(batches) if batches.len() as u64 == missed => {
                            for (_, p) in &batches {
                                self.apply_payload(p);
                            }
                            true
                        }
                        Ok(batches) => {
                            tracing::info!(endpoint = %ep, got = batches.len(), missed, "KV-event replay incomplete");
                            false
                        }
                        Err(e) => {
                            tracing::info!(endpoint = %ep, error = %e, "KV-event replay failed");
                            false
                        }
                    },
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
                    let r = self.fetch(&addr, 0, seq).await;
                    let ok = r.is_ok();
                    for (_, p) in r.iter().flatten() {
                        self.apply_payload(p);
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
    sock.send(replay_request(from)).await.map_err(zerr)?;
    let mut replies = Replies::new(from, until);
    loop {
        let msg = sock.recv().await.map_err(zerr)?.into_vec();
        if replies.take(&msg)? {
            return Ok(replies.done());
        }
    }
}

/// [`replay`] on an in-memory network: one request to the request/reply endpoint `addr`
/// (the engine's replay endpoint text), every reply back at once.
async fn replay_memory(
    net: &kthena_memnet::MemNet,
    addr: &str,
    from: u64,
    until: u64,
) -> Result<Vec<(u64, Bytes)>> {
    let request = replay_request(from);
    let messages = net
        .request(addr, request.into_vec())
        .await
        .map_err(|e| bad(format!("replay socket {addr}: {e}")))?;
    let mut replies = Replies::new(from, until);
    for msg in &messages {
        if replies.take(msg)? {
            return Ok(replies.done());
        }
    }
    Err(bad(format!("replay socket {addr}: no END_SEQ marker")))
}

/// A replay request's frames, `["", from as 8 bytes BE]`.
fn replay_request(from: u64) -> ZmqMessage {
    let mut req = ZmqMessage::from(Bytes::new());
    req.push_back(Bytes::copy_from_slice(&from.to_be_bytes()));
    req
}

/// The batches of `from..until` collected from a replay's reply messages.
struct Replies {
    range: std::ops::Range<u64>,
    out: Vec<(u64, Bytes)>,
}

impl Replies {
    fn new(from: u64, until: u64) -> Self {
        Self {
            range: from..until,
            out: Vec::new(),
        }
    }

    /// Takes one reply `["", seq, payload]` (a missing empty delimiter tolerated); true at
    /// the `END_SEQ` marker.
    fn take(&mut self, msg: &[Bytes]) -> Result<bool> {
        let rest = match msg.first() {
            Some(f) if f.is_empty() && msg.len() == 3 => &msg[1..],
            _ => msg,
        };
        let [seq, payload] = rest else {
            return Err(bad(format!("replay reply has {} frames", msg.len())));
        };
        if seq[..] == END_SEQ {
            return Ok(true);
        }
        let seq: [u8; 8] = seq[..]
            .try_into()
            .map_err(|_| bad("replay sequence frame is not 8 bytes"))?;
        let seq = u64::from_be_bytes(seq);
        if self.range.contains(&seq) {
            self.out.push((seq, payload.clone()));
        }
        Ok(false)
    }

    /// The batches, in order.
    fn done(mut self) -> Vec<(u64, Bytes)> {
        self.out.sort_by_key(|(s, _)| *s);
        self.out
    }
}

/// Subscribes to one endpoint's KV events until `cancel` fires: catches up from the replay
/// socket when there is one ([`Ingest::catch_up`]), connects (retrying with
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
    tokio::select! {
        biased;
        () = cancel.cancelled() => return,
        () = ingest.catch_up() => {}
    }
    kthena_kvevents::subscribe(
        source.endpoint.as_str(),
        &source.events,
        &mut ingest,
        &cancel,
    )
    .await;
}

/// [`subscribe`] on an in-memory network: reads `source.events`'s topic on `net` until
/// `cancel` fires (see `Router::start_in_memory`); replays go to `net`'s request/reply
/// endpoint `source.replay`.
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
    ingest.transport = Transport::Memory(net);
    ingest.metrics.set_subscribed(&ep, true);
    tokio::select! {
        biased;
        () = cancel.cancelled() => return,
        () = ingest.catch_up() => {}
    }
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
