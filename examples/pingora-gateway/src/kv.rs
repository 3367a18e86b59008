//! The engines' KV events (ZMQ SUB, decoded by `kthena-kvevents`) into the scheduler's index.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use kthena_kvevents::{SeqStep, SeqTracker, decode_batch, split_frames};
use kthena_sched::{EndpointId, KvIndex};
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use zeromq::{Socket, SocketEvent, SocketRecv, SubSocket};

/// A pingora background service: one ZMQ subscription per engine that publishes KV events,
/// each message applied to the scheduler's [`KvIndex`]. A connection that fails or drops is
/// retried every 500 ms; a sequence number that goes back (the engine restarted) clears the
/// engine's entries first.
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

    async fn subscribe(&self, endpoint: &EndpointId, addr: &str) {
        let mut seq = SeqTracker::default();
        loop {
            let mut sock = SubSocket::new();
            if sock.connect(addr).await.is_ok() && sock.subscribe("").await.is_ok() {
                self.subscribed.fetch_add(1, Relaxed);
                let mut monitor = sock.monitor();
                loop {
                    tokio::select! {
                        ev = monitor.next() => match ev {
                            Some(SocketEvent::Disconnected(_)) | None => break,
                            Some(_) => {}
                        },
                        msg = sock.recv() => match msg {
                            Ok(msg) => self.apply(endpoint, &mut seq, &msg.into_vec()),
                            Err(_) => break,
                        },
                    }
                }
                self.subscribed.fetch_sub(1, Relaxed);
                seq.reconnected();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn apply(&self, endpoint: &EndpointId, seq: &mut SeqTracker, frames: &[Bytes]) {
        let Ok((_, n, payload)) = split_frames(frames) else {
            return;
        };
        match seq.observe(n) {
            SeqStep::Duplicate => return,
            SeqStep::Rollback => self.index.remove_endpoint(endpoint),
            _ => {}
        }
        for event in decode_batch(payload).map(|b| b.events).unwrap_or_default() {
            // An event the index refuses (unknown parent block) leaves it unchanged.
            let _ = self.index.apply(endpoint, &event);
        }
    }
}

#[async_trait]
impl BackgroundService for KvEvents {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut tasks = tokio::task::JoinSet::new();
        for (endpoint, addr) in self.sources.clone() {
            let this = self.clone();
            tasks.spawn(async move { this.subscribe(&endpoint, &addr).await });
        }
        let _ = shutdown.changed().await; // dropping the set aborts the subscriptions
    }
}
