//! Go Kthena's fairness and session-boost queue families (`pkg/kthena-router/metrics/metrics.go`;
//! table in the module docs of [`super`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The queue-wait buckets of Go Kthena, seconds.
const QUEUE_BUCKETS: [f64; 11] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// The `user_id` of the per-model families (Go writes `_all`).
const ALL_USERS: &str = "_all";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelUser {
    model: String,
    user_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

type Hist<L> = Family<L, Histogram, fn() -> Histogram>;

fn hist() -> Histogram {
    Histogram::new(QUEUE_BUCKETS)
}

/// The queue families.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    /// The bounded `user_id` labels of `fair_cancelled` and `fair_dequeue`.
    users: std::sync::Arc<super::user_labels::UserLabels>,
    fair_size: Family<ModelUser, Gauge>,
    fair_duration: Hist<ModelUser>,
    fair_cancelled: Family<ModelUser, Counter>,
    fair_dequeue: Family<ModelUser, Counter>,
    fair_inflight: Family<ModelLabel, Gauge>,
    fair_refresh: Family<ModelLabel, Counter>,
    fair_rebuild: Family<ModelLabel, Counter>,
    session_size: Family<ModelLabel, Gauge>,
    session_duration: Hist<ModelLabel>,
    session_cancelled: Family<ModelLabel, Counter>,
    session_dequeue: Family<ModelLabel, Counter>,
    session_inflight: Family<ModelLabel, Gauge>,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            users: std::sync::Arc::default(),
            fair_size: Family::default(),
            fair_duration: Family::new_with_constructor(hist),
            fair_cancelled: Family::default(),
            fair_dequeue: Family::default(),
            fair_inflight: Family::default(),
            fair_refresh: Family::default(),
            fair_rebuild: Family::default(),
            session_size: Family::default(),
            session_duration: Family::new_with_constructor(hist),
            session_cancelled: Family::default(),
            session_dequeue: Family::default(),
            session_inflight: Family::default(),
        }
    }
}

fn mu(model: &str, user: &str) -> ModelUser {
    ModelUser {
        model: model.to_owned(),
        user_id: user.to_owned(),
    }
}

fn m(model: &str) -> ModelLabel {
    ModelLabel {
        model: model.to_owned(),
    }
}

impl QueueMetrics {
    /// Creates the families and registers them.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let q = Self::default();
        let r = registry;
        r.register(
            "kthena_router_fairness_queue_size",
            "Requests waiting in the fairness queue",
            q.fair_size.clone(),
        );
        r.register(
            "kthena_router_fairness_queue_duration_seconds",
            "Time requests waited in the fairness queue",
            q.fair_duration.clone(),
        );
        r.register(
            "kthena_router_fairness_queue_cancelled",
            "Requests that left the fairness queue before their turn",
            q.fair_cancelled.clone(),
        );
        r.register(
            "kthena_router_fairness_queue_dequeue",
            "Requests the fairness queue let through",
            q.fair_dequeue.clone(),
        );
        r.register(
            "kthena_router_fairness_queue_inflight",
            "Requests holding a fairness slot",
            q.fair_inflight.clone(),
        );
        r.register(
            "kthena_router_fairness_queue_priority_refresh",
            "Priorities re-read at dequeue time",
            q.fair_refresh.clone(),
        );
        r.register(
            "kthena_router_fairness_queue_heap_rebuild",
            "Queue-wide priority re-reads",
            q.fair_rebuild.clone(),
        );
        r.register(
            "kthena_router_session_boost_queue_size",
            "Requests waiting in the session-boost queue",
            q.session_size.clone(),
        );
        r.register(
            "kthena_router_session_boost_queue_duration_seconds",
            "Time requests waited in the session-boost queue",
            q.session_duration.clone(),
        );
        r.register(
            "kthena_router_session_boost_queue_cancelled",
            "Requests that left the session-boost queue before admission",
            q.session_cancelled.clone(),
        );
        r.register(
            "kthena_router_session_boost_queue_dequeue",
            "Requests the session-boost queue admitted",
            q.session_dequeue.clone(),
        );
        r.register(
            "kthena_router_session_boost_queue_inflight",
            "Requests holding a session-boost slot",
            q.session_inflight.clone(),
        );
        q
    }

    pub(crate) fn fair_size(&self, model: &str, d: i64) {
        self.fair_size
            .get_or_create(&mu(model, ALL_USERS))
            .inc_by(d);
    }

    pub(crate) fn fair_duration(&self, model: &str, secs: f64) {
        self.fair_duration
            .get_or_create(&mu(model, ALL_USERS))
            .observe(secs);
    }

    pub(crate) fn fair_cancelled(&self, model: &str, user: &str) {
        let label = self.user_label(model, user);
        self.fair_cancelled.get_or_create(&mu(model, &label)).inc();
    }

    pub(crate) fn fair_dequeue(&self, model: &str, user: &str) {
        let label = self.user_label(model, user);
        self.fair_dequeue.get_or_create(&mu(model, &label)).inc();
    }

    /// Sets how `user_id` labels are bounded.
    pub(crate) fn configure_users(&self, cfg: super::UserLabelConfig) {
        self.users.configure(cfg);
    }

    /// The bounded label of `user` (removing the series of labels that expired meanwhile);
    /// requests without a user keep Go's empty label.
    fn user_label(&self, model: &str, user: &str) -> String {
        if user.is_empty() {
            return String::new();
        }
        let (label, expired) = self.users.label(model, user);
        self.remove_users(&expired);
        label
    }

    /// Removes the series of `user_id` labels idle for the idle timeout.
    pub(crate) fn expire_idle_users(&self) {
        let expired = self.users.expire_idle();
        self.remove_users(&expired);
    }

    fn remove_users(&self, expired: &[(String, String)]) {
        for (model, label) in expired {
            let key = mu(model, label);
            self.fair_cancelled.remove(&key);
            self.fair_dequeue.remove(&key);
        }
    }

    pub(crate) fn fair_inflight(&self, model: &str, d: i64) {
        self.fair_inflight.get_or_create(&m(model)).inc_by(d);
    }

    pub(crate) fn fair_refresh(&self, model: &str) {
        self.fair_refresh.get_or_create(&m(model)).inc();
    }

    pub(crate) fn fair_rebuild(&self, model: &str) {
        self.fair_rebuild.get_or_create(&m(model)).inc();
    }

    pub(crate) fn session_size(&self, model: &str, d: i64) {
        self.session_size.get_or_create(&m(model)).inc_by(d);
    }

    pub(crate) fn session_duration(&self, model: &str, secs: f64) {
        self.session_duration.get_or_create(&m(model)).observe(secs);
    }

    pub(crate) fn session_cancelled(&self, model: &str) {
        self.session_cancelled.get_or_create(&m(model)).inc();
    }

    pub(crate) fn session_dequeue(&self, model: &str) {
        self.session_dequeue.get_or_create(&m(model)).inc();
    }

    pub(crate) fn session_inflight(&self, model: &str, d: i64) {
        self.session_inflight.get_or_create(&m(model)).inc_by(d);
    }
}
