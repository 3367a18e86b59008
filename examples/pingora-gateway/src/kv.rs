//! The engines' KV events (ZMQ SUB through `kthena_kvevents::subscribe`, decoded by
//! `kthena-kvevents`) into the scheduler's index.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use async_trait::async_trait;
use bytes::Bytes;
use kthena_kvevents::{SeqStep, SeqTracker, Subscriber, decode_batch, split_frames};
use kthena_sched::{EndpointId, KvIndex};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio_util::sync::CancellationToken;

/// A pingora background service: one ZMQ subscription per engine that publishes KV events,
/// each message applied to the scheduler's [`KvIndex`]. A connection that fails or drops is
/// retried with backoff (50 ms doubling to 2 s); a sequence number that goes back (the engine
/// restarted) clears the engine's entries first.
#[derive(Debug, Clone)]
pub struct KvEvents {
    pub(crate) sources: Vec<(EndpointId, String)>,
    pub(crate) index: Arc<dyn KvIndex>,
    pub(crate) subscribed: Arc<AtomicUsize>,
}

impl KvEvents {
    /// How many engines' publishers are connected and subscribed right now.
    pub fn subscribed(&self) -> usize {
        self.subscribed.load(Relaxed)
    }
}

/// One engine's subscription: its sequence numbers and where its events go.
struct Subscription {
    endpoint: EndpointId,
    index: Arc<dyn KvIndex>,
    subscribed: Arc<AtomicUsize>,
    seq: SeqTracker,
}

impl Subscriber for Subscription {
    async fn message(&mut self, frames: &[Bytes]) {
        let Ok((_, n, payload)) = split_frames(frames) else {
            return;
        };
        match self.seq.observe(n) {
            SeqStep::Duplicate => return,
            SeqStep::Rollback => self.index.remove_endpoint(&self.endpoint),
            _ => {}
        }
        for event in decode_batch(payload).map(|b| b.events).unwrap_or_default() {
            // An event the index refuses (unknown parent block) leaves it unchanged.
            let _ = self.index.apply(&self.endpoint, &event);
        }
    }

    fn connected(&mut self, on: bool) {
        if on {
            self.subscribed.fetch_add(1, Relaxed);
        } else {
            self.subscribed.fetch_sub(1, Relaxed);
            self.seq.reconnected();
        }
    }
}

#[async_trait]
impl BackgroundService for KvEvents {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let cancel = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (endpoint, addr) in self.sources.clone() {
            let mut engine = Subscription {
                endpoint,
                index: Arc::clone(&self.index),
                subscribed: Arc::clone(&self.subscribed),
                seq: SeqTracker::default(),
            };
            let cancel = cancel.clone();
            tasks.spawn(async move {
                let name = engine.endpoint.as_str().to_owned();
                kthena_kvevents::subscribe(&name, &addr, &mut engine, &cancel).await;
            });
        }
        let _ = shutdown.changed().await;
        cancel.cancel();
        tasks.join_all().await;
    }
}
