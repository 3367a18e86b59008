//! The per-model fairness queue (Go Kthena `datastore/fairness_queue.go`).
//!
//! Order: one user's requests first in, first out; between users the lower priority value
//! (weighted usage, [`super::tokens`]) first, a tie to the earlier arrival. Requests of no
//! user carry `f64::MAX` and wait behind every user. Go keeps one heap with that comparison;
//! here each user has a FIFO and the heads are compared, the same order without a
//! comparison that is not transitive.
//!
//! A dispatcher task per queue hands out turns: in QPS mode one per `1 / FAIRNESS_MAX_QPS`
//! (Go's ticker), in slot mode one whenever one of `FAIRNESS_MAX_CONCURRENT` slots is free
//! (the slot is taken before the pick, so the pick sees every arrival up to that moment).
//! A waiter that went away (timeout, client disconnect) is skipped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

use super::metrics::QueueMetrics;
use super::tokens::TokenTracker;
use super::{FairnessConfig, Slot, lock};
use crate::error::Error;

/// The user label of requests without a user id.
const NO_USER: &str = "";

struct Entry {
    priority: f64,
    arrival: Instant,
    seq: u64,
    tx: oneshot::Sender<Option<OwnedSemaphorePermit>>,
}

#[derive(Default)]
struct State {
    users: HashMap<Arc<str>, VecDeque<Entry>>,
    len: usize,
    seq: u64,
    closed: bool,
}

/// One model's fairness queue.
pub(crate) struct FairQueue {
    model: Arc<str>,
    cfg: FairnessConfig,
    tracker: Arc<TokenTracker>,
    metrics: QueueMetrics,
    state: Mutex<State>,
    notify: Arc<Notify>,
    slots: Option<Arc<Semaphore>>,
}

impl std::fmt::Debug for FairQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairQueue")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Drop for FairQueue {
    fn drop(&mut self) {
        // Wakes the dispatcher so that it sees the queue gone and ends.
        self.notify.notify_one();
    }
}

impl FairQueue {
    /// A queue for `model` with its dispatcher task (ends when the queue is dropped).
    pub(crate) fn start(
        model: Arc<str>,
        cfg: FairnessConfig,
        tracker: Arc<TokenTracker>,
        metrics: QueueMetrics,
    ) -> Arc<Self> {
        let slots = (cfg.max_concurrent > 0).then(|| Arc::new(Semaphore::new(cfg.max_concurrent)));
        let q = Arc::new(Self {
            model,
            cfg,
            tracker,
            metrics,
            state: Mutex::new(State::default()),
            notify: Arc::new(Notify::new()),
            slots,
        });
        let tasks = tokio_util::task::TaskTracker::new();
        tasks.spawn(dispatch(Arc::downgrade(&q), Arc::clone(&q.notify)));
        tasks.close();
        q
    }

    /// Waits for a turn with `priority` (lower first) for `user`, at most `timeout`.
    ///
    /// # Errors
    /// [`Error::QueueTimeout`] when the turn did not come within `timeout`;
    /// [`Error::Enqueue`] when the queue was closed (its model lost its last route).
    pub(crate) async fn wait(
        &self,
        user: Option<Arc<str>>,
        priority: f64,
        timeout: Duration,
    ) -> Result<Option<Slot>, Error> {
        let (tx, rx) = oneshot::channel();
        let arrival = Instant::now();
        let user_label = user.unwrap_or_else(|| NO_USER.into());
        {
            let mut st = lock(&self.state);
            if st.closed {
                return Err(Error::ModelNotFound {
                    model: self.model.to_string(),
                });
            }
            st.seq += 1;
            let seq = st.seq;
            st.len += 1;
            st.users.entry(user_label).or_default().push_back(Entry {
                priority,
                arrival,
                seq,
                tx,
            });
        }
        self.metrics.fair_size(&self.model, 1);
        self.notify.notify_one();
        let got = tokio::time::timeout(timeout, rx).await;
        match got {
            Ok(Ok(permit)) => Ok(permit.map(|p| {
                self.metrics.fair_inflight(&self.model, 1);
                Slot::Fair(p, Box::new((self.metrics.clone(), Arc::clone(&self.model))))
            })),
            Ok(Err(_)) => Err(Error::ModelNotFound {
                model: self.model.to_string(),
            }),
            // The entry stays and is skipped (and counted as cancelled) when it comes up.
            Err(_) => Err(Error::QueueTimeout { timeout }),
        }
    }

    /// Answers every waiting request 404 and refuses new ones.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        let n = st.len;
        st.users.clear();
        st.len = 0;
        drop(st);
        #[allow(
            clippy::cast_possible_wrap,
            reason = "queue lengths are far below i64::MAX"
        )]
        self.metrics.fair_size(&self.model, -(n as i64));
        self.notify.notify_one();
    }

    /// Requests waiting (including ones that left and are not skipped yet).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.state).len
    }

    /// The user whose head goes next: lowest `(priority, arrival, seq)`.
    fn best(st: &State) -> Option<Arc<str>> {
        st.users
            .iter()
            .filter_map(|(u, q)| q.front().map(|e| (u, e)))
            .min_by(|(_, a), (_, b)| {
                a.priority
                    .total_cmp(&b.priority)
                    .then(a.arrival.cmp(&b.arrival))
                    .then(a.seq.cmp(&b.seq))
            })
            .map(|(u, _)| Arc::clone(u))
    }

    /// Re-reads the chosen user's priority at dequeue time (`FAIRNESS_PRIORITY_REFRESH_RETRIES`):
    /// a user whose usage grew past the next user's goes back; after the retries, a long
    /// queue (≥ `FAIRNESS_REBUILD_THRESHOLD`) re-reads every user's head.
    fn refresh(&self, st: &mut State, mut user: Arc<str>) -> Arc<str> {
        for _ in 0..self.cfg.refresh_retries {
            if user.as_ref() == NO_USER {
                return user;
            }
            let now_p = self.priority_of(&user);
            let Some(head) = st.users.get_mut(&user).and_then(VecDeque::front_mut) else {
                return user;
            };
            if now_p.total_cmp(&head.priority).is_eq() {
                return user;
            }
            head.priority = now_p;
            self.metrics.fair_refresh(&self.model);
            match Self::best(st) {
                Some(b) if b == user => return user,
                Some(b) => user = b,
                None => return user,
            }
        }
        if self.cfg.refresh_retries > 0 && st.len >= self.cfg.rebuild_threshold {
            let users: Vec<Arc<str>> = st.users.keys().cloned().collect();
            for u in users {
                if u.as_ref() == NO_USER {
                    continue;
                }
                let p = self.priority_of(&u);
                if let Some(h) = st.users.get_mut(&u).and_then(VecDeque::front_mut) {
                    h.priority = p;
                }
            }
            self.metrics.fair_rebuild(&self.model);
            return Self::best(st).unwrap_or(user);
        }
        user
    }

    fn priority_of(&self, user: &str) -> f64 {
        self.tracker.priority(
            user,
            &self.model,
            self.cfg.token_weight,
            self.cfg.request_num_weight,
        )
    }

    /// Takes the next live entry, if any (entries whose waiter left are dropped).
    fn pop(&self) -> Option<(Arc<str>, Entry)> {
        let mut st = lock(&self.state);
        loop {
            let mut user = Self::best(&st)?;
            if self.cfg.refresh_retries > 0 {
                user = self.refresh(&mut st, user);
            }
            let q = st.users.get_mut(&user)?;
            let e = q.pop_front()?;
            if q.is_empty() {
                st.users.remove(&user);
            }
            st.len -= 1;
            self.metrics.fair_size(&self.model, -1);
            self.metrics
                .fair_duration(&self.model, e.arrival.elapsed().as_secs_f64());
            if e.tx.is_closed() {
                self.metrics.fair_cancelled(&self.model, &user);
                continue;
            }
            return Some((user, e));
        }
    }
}

/// The dispatcher: one turn per tick (QPS mode) or per free slot (slot mode).
async fn dispatch(q: Weak<FairQueue>, notify: Arc<Notify>) {
    let Some(first) = q.upgrade() else { return };
    let period = Duration::from_secs(1) / first.cfg.max_qps.max(1);
    let slots = first.slots.clone();
    drop(first);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let permit = match &slots {
            Some(s) => match Arc::clone(s).acquire_owned().await {
                Ok(p) => Some(p),
                Err(_) => return,
            },
            None => {
                tick.tick().await;
                None
            }
        };
        let mut permit = permit;
        loop {
            let Some(queue) = q.upgrade() else { return };
            if lock(&queue.state).closed {
                return;
            }
            if let Some((user, e)) = queue.pop() {
                match e.tx.send(permit.take()) {
                    Ok(()) => {
                        queue.metrics.fair_dequeue(&queue.model, &user);
                        break;
                    }
                    // Left between the check and the send: the turn goes to the next.
                    Err(p) => {
                        queue.metrics.fair_cancelled(&queue.model, &user);
                        permit = p;
                        continue;
                    }
                }
            }
            drop(queue);
            notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests;
