//! The per-model session-boost queue (Go Kthena `datastore/session_boost_queue.go`).
//!
//! Order: requests of a session in the LRU of recently completed sessions
//! (`SESSION_BOOST_MAX_SESSIONS`) first, the most recently completed session first, a tie
//! first in; then the others first in, first out. Admission is event driven (on arrival and
//! on release): while fewer than `SESSION_BOOST_INFLIGHT_PER_POD × pods` (pods serving the
//! model; none known counts as one) are in flight and one such pod reports no waiting
//! request (or none is known), the next request goes. With `SESSION_BOOST_GRACE_PERIOD`, a
//! freed slot is held that long before the next pick, for a follow-up turn to arrive.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use lru::LruCache;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::metrics::QueueMetrics;
use super::{Capacity, SessionBoostConfig, lock};
use crate::error::Error;

struct Entry {
    arrival: Instant,
    tx: oneshot::Sender<SessionSlot>,
}

#[derive(Default)]
struct State {
    /// Boosted requests by (most recent previous completion first, arrival order).
    boosted: BTreeMap<(Reverse<Instant>, u64), Entry>,
    plain: VecDeque<Entry>,
    seq: u64,
    inflight: usize,
    /// Slots freed and held for the grace period.
    held: usize,
    closed: bool,
}

impl State {
    fn len(&self) -> usize {
        self.boosted.len() + self.plain.len()
    }
}

/// One model's session-boost queue.
pub(crate) struct SessionQueue {
    model: Arc<str>,
    cfg: SessionBoostConfig,
    capacity: Capacity,
    metrics: QueueMetrics,
    state: Mutex<State>,
    completed: Mutex<LruCache<Arc<str>, Instant>>,
    this: Weak<Self>,
}

impl std::fmt::Debug for SessionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionQueue")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// An admitted request's in-flight slot; dropping it frees the slot.
pub(crate) struct SessionSlot {
    queue: Option<Arc<SessionQueue>>,
}

impl std::fmt::Debug for SessionSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSlot").finish_non_exhaustive()
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            q.release();
        }
    }
}

impl SessionQueue {
    /// A queue for `model` admitting against `capacity`.
    pub(crate) fn new(
        model: Arc<str>,
        cfg: SessionBoostConfig,
        capacity: Capacity,
        metrics: QueueMetrics,
    ) -> Arc<Self> {
        let cap = NonZeroUsize::new(cfg.max_sessions).unwrap_or(NonZeroUsize::MIN);
        Arc::new_cyclic(|this| Self {
            model,
            cfg,
            capacity,
            metrics,
            state: Mutex::new(State::default()),
            completed: Mutex::new(LruCache::new(cap)),
            this: this.clone(),
        })
    }

    /// Records that a turn of `session` completed: its next turn is boosted.
    pub(crate) fn completed(&self, session: &Arc<str>) {
        lock(&self.completed).put(Arc::clone(session), Instant::now());
    }

    /// Waits for admission, at most `timeout` (`None`: as long as the caller waits).
    ///
    /// # Errors
    /// [`Error::QueueTimeout`] after `timeout`; [`Error::ModelNotFound`] when the queue was
    /// closed (its model lost its last route).
    pub(crate) async fn wait(
        &self,
        session: Option<Arc<str>>,
        timeout: Option<Duration>,
    ) -> Result<SessionSlot, Error> {
        let (tx, rx) = oneshot::channel();
        let boost = session
            .as_ref()
            .and_then(|s| lock(&self.completed).peek(s).copied());
        {
            let mut st = lock(&self.state);
            if st.closed {
                return Err(self.gone());
            }
            let e = Entry {
                arrival: Instant::now(),
                tx,
            };
            st.seq += 1;
            let seq = st.seq;
            match boost {
                Some(at) => {
                    st.boosted.insert((Reverse(at), seq), e);
                }
                None => st.plain.push_back(e),
            }
            self.metrics.session_size(&self.model, 1);
            self.dispatch(&mut st);
        }
        let got = match timeout {
            Some(t) => tokio::time::timeout(t, rx)
                .await
                .map_err(|_| Error::QueueTimeout { timeout: t })?,
            None => rx.await,
        };
        got.map_err(|_| self.gone())
    }

    fn gone(&self) -> Error {
        Error::ModelNotFound {
            model: self.model.to_string(),
        }
    }

    /// Answers every waiting request 404 and refuses new ones.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        #[allow(
            clippy::cast_possible_wrap,
            reason = "queue lengths are far below i64::MAX"
        )]
        self.metrics.session_size(&self.model, -(st.len() as i64));
        st.boosted.clear();
        st.plain.clear();
    }

    fn pop(&self, st: &mut State) -> Option<Entry> {
        let e = match st.boosted.pop_first() {
            Some((_, e)) => e,
            None => st.plain.pop_front()?,
        };
        self.metrics.session_size(&self.model, -1);
        self.metrics
            .session_duration(&self.model, e.arrival.elapsed().as_secs_f64());
        Some(e)
    }

    fn drain_cancelled(&self, st: &mut State) {
        let before = st.len();
        st.boosted.retain(|_, e| !e.tx.is_closed());
        st.plain.retain(|e| !e.tx.is_closed());
        let n = before - st.len();
        if n > 0 {
            #[allow(
                clippy::cast_possible_wrap,
                reason = "queue lengths are far below i64::MAX"
            )]
            self.metrics.session_size(&self.model, -(n as i64));
            for _ in 0..n {
                self.metrics.session_cancelled(&self.model);
            }
        }
    }

    /// Admits as many as the limits allow (the caller holds the state lock).
    fn dispatch(&self, st: &mut MutexGuard<'_, State>) {
        let Some(this) = self.this.upgrade() else {
            return;
        };
        let (pods, any_idle) = (self.capacity)(&self.model);
        let limit = self.cfg.inflight_per_pod.max(1) * pods.max(1);
        loop {
            if st.inflight + st.held >= limit || !any_idle {
                self.drain_cancelled(st);
                return;
            }
            let Some(e) = self.pop(st) else { return };
            if e.tx.is_closed() {
                self.metrics.session_cancelled(&self.model);
                continue;
            }
            st.inflight += 1;
            let slot = SessionSlot {
                queue: Some(Arc::clone(&this)),
            };
            match e.tx.send(slot) {
                Ok(()) => {
                    self.metrics.session_dequeue(&self.model);
                    self.metrics.session_inflight(&self.model, 1);
                }
                Err(mut slot) => {
                    // Left between the check and the send: nothing was taken.
                    slot.queue = None;
                    st.inflight -= 1;
                    self.metrics.session_cancelled(&self.model);
                }
            }
        }
    }

    fn release(self: Arc<Self>) {
        self.metrics.session_inflight(&self.model, -1);
        let mut st = lock(&self.state);
        st.inflight -= 1;
        if self.cfg.grace_period.is_zero() {
            self.dispatch(&mut st);
            return;
        }
        st.held += 1;
        drop(st);
        let grace = self.cfg.grace_period;
        let tasks = tokio_util::task::TaskTracker::new();
        tasks.spawn(async move {
            tokio::time::sleep(grace).await;
            let mut st = lock(&self.state);
            st.held -= 1;
            self.dispatch(&mut st);
        });
        tasks.close();
    }
}

#[cfg(test)]
mod tests;
