//! Request queues in front of the engines (Go Kthena `pkg/kthena-router/datastore/`
//! `fairness_queue.go` and `session_boost_queue.go`): Go Kthena's per-user **fairness
//! queue** and its **session-boost queue**, one queue per model name, created on the first
//! request for the model. At most one of the two is on (`ENABLE_FAIRNESS_SCHEDULING`,
//! `ENABLE_SESSION_BOOST`; both is a configuration error, as Go's fatal error).
//!
//! * Fairness ([`fair`]): requests wait in priority order, priority =
//!   `FAIRNESS_PRIORITY_TOKEN_WEIGHT × tokens + FAIRNESS_PRIORITY_REQUEST_NUM_WEIGHT ×
//!   requests` of the user for the model over the last `FAIRNESS_WINDOW_SIZE` ([`tokens`]);
//!   lower first, one user's own requests first in, first out. Dequeued at
//!   `FAIRNESS_MAX_QPS` per second, or whenever one of `FAIRNESS_MAX_CONCURRENT` slots is
//!   free. A wait longer than `FAIRNESS_QUEUE_TIMEOUT` answers 504.
//! * Session boost ([`session`]): a request whose session (header `SESSION_BOOST_HEADER`)
//!   completed a turn recently goes before first turns, the most recently completed session
//!   first; admitted while fewer than `SESSION_BOOST_INFLIGHT_PER_POD × pods` are in flight
//!   and a pod reports no waiting request. `SESSION_BOOST_TIMEOUT` bounds the wait (504).
//!
//! A client that goes away while queued never reaches an engine: its entry is skipped, and
//! the access log records 503 `Client disconnected while waiting in queue`. The admitted
//! request holds its [`Ticket`] until its response body ends (the accounting settles), which
//! then frees the slot, charges the user's tokens and marks the session completed.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `kthena_router_fairness_queue_size` | gauge | `model`, `user_id` (`_all`) |
//! | `kthena_router_fairness_queue_duration_seconds` | histogram | `model`, `user_id` (`_all`) |
//! | `kthena_router_fairness_queue_cancelled_total` | counter | `model`, `user_id` (bounded: [`user_labels`]) |
//! | `kthena_router_fairness_queue_dequeue_total` | counter | `model`, `user_id` (bounded: [`user_labels`]) |
//! | `kthena_router_fairness_queue_inflight` | gauge | `model` (slot mode) |
//! | `kthena_router_session_boost_queue_size` | gauge | `model` |
//! | `kthena_router_session_boost_queue_duration_seconds` | histogram | `model` |
//! | `kthena_router_session_boost_queue_cancelled_total` | counter | `model` |
//! | `kthena_router_session_boost_queue_dequeue_total` | counter | `model` |
//! | `kthena_router_session_boost_queue_inflight` | gauge | `model` |

mod config;
pub(crate) mod fair;
mod metrics;
pub(crate) mod session;
pub(crate) mod tokens;
mod user_labels;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

pub use config::{FairnessConfig, QueueConfig, QueueMode, SessionBoostConfig};
pub(crate) use metrics::QueueMetrics;
pub use user_labels::UserLabelConfig;

use crate::error::Error;

/// Who and what a queued request is.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    /// The request's model name (the queue).
    pub(crate) model: Arc<str>,
    /// The user id (JWT `sub`, else the body's `user`); `None` waits behind every user.
    pub(crate) user: Option<Arc<str>>,
    /// The session id (session boost only).
    pub(crate) session: Option<Arc<str>>,
}

/// What an admitted request holds until it settles: the slot (fairness slot mode or session
/// boost), and what to charge or mark when it ends.
#[derive(Debug)]
pub(crate) struct Ticket {
    slot: Option<Slot>,
    queues: Arc<Queues>,
    who: Waiting,
}

/// A held admission slot, given back when dropped.
#[allow(dead_code, reason = "the fields are held for their Drop")]
#[derive(Debug)]
pub(crate) enum Slot {
    /// One of `FAIRNESS_MAX_CONCURRENT`.
    Fair(
        tokio::sync::OwnedSemaphorePermit,
        Box<(QueueMetrics, Arc<str>)>,
    ),
    /// One of the session-boost queue's in-flight slots.
    Session(session::SessionSlot),
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Self::Fair(_, m) = self {
            m.0.fair_inflight(&m.1, -1);
        }
    }
}

impl Ticket {
    /// The request ended: frees the slot; on success (`status < 400`) charges
    /// `input_tokens`/`output_tokens` to the user (fairness) or marks the session completed
    /// (session boost).
    pub(crate) fn settled(mut self, success: bool, input_tokens: u64, output_tokens: u64) {
        // The slot goes back first: the next request may start while we account.
        drop(self.slot.take());
        match &self.queues.mode {
            QueueMode::Fairness(_) => {
                if let Some(u) = &self.who.user {
                    #[allow(
                        clippy::cast_precision_loss,
                        reason = "token counts are far below 2^52"
                    )]
                    self.queues.tracker.record(
                        u,
                        &self.who.model,
                        input_tokens as f64,
                        output_tokens as f64,
                    );
                }
            }
            QueueMode::SessionBoost(cfg) => {
                if success && let Some(s) = &self.who.session {
                    self.queues.session_queue(&self.who.model, cfg).completed(s);
                }
            }
            QueueMode::Off => {}
        }
    }
}

/// The capacity view session boost admits against: `(pods serving the model, whether one of
/// them reports no waiting request or none is known)`.
pub(crate) type Capacity = Arc<dyn Fn(&str) -> (usize, bool) + Send + Sync>;

/// Every model's queue, created on first use.
pub(crate) struct Queues {
    mode: QueueMode,
    tracker: Arc<tokens::TokenTracker>,
    metrics: QueueMetrics,
    capacity: Capacity,
    fair: Mutex<HashMap<Arc<str>, Arc<fair::FairQueue>>>,
    sessions: Mutex<HashMap<Arc<str>, Arc<session::SessionQueue>>>,
    generation: AtomicU64,
    this: Weak<Self>,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Queues {
    /// The queues of `mode` (`None` when both are off), reporting to `metrics`; session
    /// boost reads the pods' capacity through `capacity`.
    pub(crate) fn new(
        mode: QueueMode,
        metrics: QueueMetrics,
        capacity: Capacity,
    ) -> Option<Arc<Self>> {
        let window = match &mode {
            QueueMode::Off => return None,
            QueueMode::Fairness(f) => f.window,
            QueueMode::SessionBoost(_) => std::time::Duration::from_secs(300),
        };
        let (input_w, output_w) = match &mode {
            QueueMode::Fairness(f) => (f.input_token_weight, f.output_token_weight),
            _ => (1.0, 2.0),
        };
        Some(Arc::new_cyclic(|this| Self {
            mode,
            tracker: Arc::new(tokens::TokenTracker::new(window, input_w, output_w)),
            metrics,
            capacity,
            fair: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            this: this.clone(),
        }))
    }

    /// The session id header of session boost (`None` in fairness mode).
    pub(crate) fn session_header(&self) -> Option<&str> {
        match &self.mode {
            QueueMode::SessionBoost(s) => Some(&s.header),
            _ => None,
        }
    }

    /// Waits for `who`'s turn.
    ///
    /// # Errors
    /// [`Error::QueueTimeout`] after the mode's wait bound (504). A caller that is dropped
    /// while waiting leaves the queue (its entry is skipped).
    pub(crate) async fn wait(&self, who: Waiting) -> Result<Ticket, Error> {
        let this = self.this.upgrade().ok_or(Error::Enqueue {
            reason: "the router is shutting down".into(),
        })?;
        let slot = match &self.mode {
            QueueMode::Off => None,
            QueueMode::Fairness(cfg) => {
                let q = self.fair_queue(&who.model, cfg);
                let priority = match &who.user {
                    Some(u) => self.tracker.priority(
                        u,
                        &who.model,
                        cfg.token_weight,
                        cfg.request_num_weight,
                    ),
                    None => f64::MAX,
                };
                q.wait(who.user.clone(), priority, cfg.timeout).await?
            }
            QueueMode::SessionBoost(cfg) => {
                let q = self.session_queue(&who.model, cfg);
                Some(Slot::Session(
                    q.wait(who.session.clone(), cfg.timeout).await?,
                ))
            }
        };
        Ok(Ticket {
            slot,
            queues: this,
            who,
        })
    }

    fn fair_queue(&self, model: &Arc<str>, cfg: &FairnessConfig) -> Arc<fair::FairQueue> {
        let mut g = lock(&self.fair);
        if let Some(q) = g.get(model) {
            return Arc::clone(q);
        }
        let q = fair::FairQueue::start(
            Arc::clone(model),
            cfg.clone(),
            Arc::clone(&self.tracker),
            self.metrics.clone(),
        );
        g.insert(Arc::clone(model), Arc::clone(&q));
        q
    }

    fn session_queue(
        &self,
        model: &Arc<str>,
        cfg: &SessionBoostConfig,
    ) -> Arc<session::SessionQueue> {
        let mut g = lock(&self.sessions);
        if let Some(q) = g.get(model) {
            return Arc::clone(q);
        }
        let q = session::SessionQueue::new(
            Arc::clone(model),
            cfg.clone(),
            Arc::clone(&self.capacity),
            self.metrics.clone(),
        );
        g.insert(Arc::clone(model), Arc::clone(&q));
        q
    }

    /// Once per snapshot `generation`: closes the queues of models no ModelRoute serves any
    /// more (`known` says which are); their waiting requests are answered 404 at once.
    pub(crate) fn on_snapshot(&self, generation: u64, known: impl Fn(&str) -> bool) {
        if self.generation.swap(generation, Ordering::Relaxed) == generation {
            return;
        }
        lock(&self.fair).retain(|m, q| {
            let keep = known(m);
            if !keep {
                q.close();
            }
            keep
        });
        lock(&self.sessions).retain(|m, q| {
            let keep = known(m);
            if !keep {
                q.close();
            }
            keep
        });
    }
}
