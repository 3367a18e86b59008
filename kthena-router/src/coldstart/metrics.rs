//! The cold-start families (table in `docs/observability.md`) and the per-ModelServer
//! activity behind `kthena_router_model_server_idle_seconds`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// Cold-start wait buckets, seconds: engines load in seconds to minutes.
const WAIT_BUCKETS: [f64; 12] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HeldLabels {
    model: Arc<str>,
    model_server: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModelLabel {
    model: Arc<str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    model: Arc<str>,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ServerLabel {
    model_server: Arc<str>,
}

/// How a held request left the hold (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// An endpoint became ready; the request went on.
    Released,
    /// `coldStart.holdTimeout` passed: 503 `cold_start_timeout`.
    Timeout,
    /// The client went away while held.
    ClientDisconnected,
    /// The hold of the ModelServer was full: 503 `cold_start_queue_full`.
    Rejected,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Timeout => "timeout",
            Self::ClientDisconnected => "client_disconnected",
            Self::Rejected => "rejected",
        }
    }
}

/// Requests in flight for one ModelServer and when the last one ended.
#[derive(Debug, Clone, Copy)]
struct Activity {
    active: u64,
    last_end: Instant,
}

type ActivityMap = Arc<Mutex<HashMap<Arc<str>, Activity>>>;

fn lock(m: &ActivityMap) -> MutexGuard<'_, HashMap<Arc<str>, Activity>> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The cold-start families and the activity of each ModelServer.
#[derive(Debug, Clone)]
pub(crate) struct ColdStartMetrics {
    held: Family<HeldLabels, Gauge>,
    wait: Family<ModelLabel, Histogram, fn() -> Histogram>,
    outcomes: Family<OutcomeLabels, Counter>,
    idle: Family<ServerLabel, Gauge<f64, AtomicU64>>,
    activity: ActivityMap,
}

fn wait_hist() -> Histogram {
    Histogram::new(WAIT_BUCKETS)
}

impl ColdStartMetrics {
    /// Creates the families and registers them in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self {
            held: Family::default(),
            wait: Family::new_with_constructor(wait_hist),
            outcomes: Family::default(),
            idle: Family::default(),
            activity: Arc::default(),
        };
        registry.register(
            "kthena_router_cold_start_held_requests",
            "Requests held now because their ModelServer has no ready endpoint",
            m.held.clone(),
        );
        registry.register(
            "kthena_router_cold_start_wait_seconds",
            "How long a held request waited, observed when it left the hold",
            m.wait.clone(),
        );
        registry.register(
            "kthena_router_cold_start_requests",
            "Held requests by outcome (released, timeout, client_disconnected, rejected)",
            m.outcomes.clone(),
        );
        registry.register(
            "kthena_router_model_server_idle_seconds",
            "Seconds since a request routed to the ModelServer last ended; 0 while one is held or in flight",
            m.idle.clone(),
        );
        m
    }

    /// `kthena_router_cold_start_held_requests{model, model_server}` += `delta`.
    pub(crate) fn held(&self, model: &Arc<str>, server: &Arc<str>, delta: i64) {
        self.held
            .get_or_create(&HeldLabels {
                model: Arc::clone(model),
                model_server: Arc::clone(server),
            })
            .inc_by(delta);
    }

    /// One request left the hold with `outcome` (a `rejected` one was never held and
    /// waited nothing: no wait observation).
    pub(crate) fn left(&self, model: &Arc<str>, outcome: Outcome, waited: Option<f64>) {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                model: Arc::clone(model),
                outcome: outcome.label(),
            })
            .inc();
        if let Some(w) = waited {
            self.wait
                .get_or_create(&ModelLabel {
                    model: Arc::clone(model),
                })
                .observe(w);
        }
    }

    /// One more request for `server` until the guard drops (its accounting settles).
    pub(crate) fn enter(&self, server: &str) -> ActiveGuard {
        let key: Arc<str> = Arc::from(server);
        let mut map = lock(&self.activity);
        map.entry(Arc::clone(&key))
            .or_insert(Activity {
                active: 0,
                last_end: Instant::now(),
            })
            .active += 1;
        ActiveGuard {
            activity: Arc::clone(&self.activity),
            server: key,
        }
    }

    /// Rewrites the idle series: one per ModelServer of `servers` (the current snapshot's),
    /// seconds since its last request ended (or since first seen), 0 while one is active.
    /// ModelServers no longer listed and not active are forgotten.
    pub(crate) fn refresh_idle<'a>(&self, servers: impl Iterator<Item = &'a str>) {
        let now = Instant::now();
        let mut map = lock(&self.activity);
        let listed: std::collections::HashSet<&str> = servers.collect();
        map.retain(|k, a| a.active > 0 || listed.contains(&**k));
        self.idle.clear();
        for s in listed {
            let a = map.entry(Arc::from(s)).or_insert(Activity {
                active: 0,
                last_end: now,
            });
            let idle = if a.active > 0 {
                0.0
            } else {
                (now - a.last_end).as_secs_f64()
            };
            self.idle
                .get_or_create(&ServerLabel {
                    model_server: Arc::from(s),
                })
                .set(idle);
        }
    }
}

/// A request counted as active for its ModelServer; dropping it ends the request there.
#[derive(Debug)]
pub(crate) struct ActiveGuard {
    activity: ActivityMap,
    server: Arc<str>,
}

impl ActiveGuard {
    /// The ModelServer (`namespace/name`).
    pub(crate) fn server(&self) -> &str {
        &self.server
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let mut map = lock(&self.activity);
        if let Some(a) = map.get_mut(&self.server) {
            a.active = a.active.saturating_sub(1);
            a.last_end = Instant::now();
        }
    }
}

impl ColdStartMetrics {
    /// Notes the ModelServers of a new snapshot: idle time of one not seen before counts
    /// from now.
    pub(crate) fn know<'a>(&self, servers: impl Iterator<Item = &'a str>) {
        let now = Instant::now();
        let mut map = lock(&self.activity);
        for s in servers {
            if !map.contains_key(s) {
                map.insert(
                    Arc::from(s),
                    Activity {
                        active: 0,
                        last_end: now,
                    },
                );
            }
        }
    }
}
