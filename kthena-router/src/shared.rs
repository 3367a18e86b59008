//! The state shared by every request of a router: the routing snapshot, the upstream client,
//! metrics, access log, and the settings and limiters the pipeline's layers read.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::Semaphore;

use crate::discovery::Snapshot;
use crate::scrape::HttpClient;
use crate::server::listener::ListenerConfig;
use crate::telemetry::accesslog::AccessLog;
use crate::telemetry::metrics::Metrics;
use crate::upstream::overload::OverloadConfig;

/// State shared by every request.
#[derive(Debug)]
pub struct Shared {
    /// The current routing snapshot, swapped atomically on reload.
    pub snapshot: ArcSwap<Snapshot>,
    /// Upstream HTTP client (pooled connections).
    pub client: HttpClient,
    /// Router metrics.
    pub metrics: Arc<Metrics>,
    /// Access log.
    pub access_log: Arc<AccessLog>,
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Set once the first scrape pass over every endpoint finished.
    pub ready: AtomicBool,
    /// Set once discovery finished its first full sync (always in standalone mode; in
    /// cluster mode after every reflector listed and the first endpoints were scraped).
    pub synced: AtomicBool,
    /// Listener settings; the body read timeouts apply here.
    pub listener: ListenerConfig,
    /// The bytes all request bodies being held may take together
    /// (`listener.maxBufferedBodyBytes`).
    pub(crate) body_budget: Arc<crate::body::BodyBudget>,
    /// Longest gap between two body chunks of an engine's answer (`None`: no limit).
    pub upstream_idle_timeout: Option<std::time::Duration>,
    /// Overload protection settings (in-flight caps, circuit breakers).
    pub overload: OverloadConfig,
    /// The admission slots of `overload.maxInFlight` (`None` without a cap).
    pub(crate) admission: Option<Arc<Semaphore>>,
    /// JWT authentication (`None`: off).
    pub(crate) auth: Option<Arc<crate::auth::Authenticator>>,
    /// The client connections all listeners may hold together (from `RLIMIT_NOFILE`).
    pub(crate) conn_budget: crate::server::listener::ConnBudget,
    /// The `auth:` section (also read with authentication off: admin calls, forwarding of
    /// the client's `Authorization`).
    pub(crate) auth_cfg: crate::auth::AuthConfig,
    /// The token rate limiters of the routes' `rateLimit`s.
    pub(crate) rate_limits: crate::ratelimit::RateLimits,
    /// Gateway API mode's listeners, HTTPRoutes and InferencePools (`None`: mode off).
    pub(crate) gateway: crate::gateway::StateSlot,
    /// The fairness or session-boost queues (unset when both are off).
    pub(crate) queues: std::sync::OnceLock<Arc<crate::queue::Queues>>,
    /// Per-endpoint in-flight counts shared through Redis or an in-process board (unset
    /// without either).
    pub(crate) in_flight_share: std::sync::OnceLock<crate::upstream::inflight::InFlightShare>,
    /// Cancelled when a listener's `drainTimeout` ran out at shutdown and its remaining
    /// connections are being closed: a response cut then is the router's doing.
    pub(crate) drain_cut: tokio_util::sync::CancellationToken,
    /// The in-memory network the router runs on instead of TCP (`None`: TCP), see
    /// [`crate::Router::start_in_memory`]. KV events are then subscribed to on it, and work
    /// that would go to the blocking pool runs inline, so that a run on a paused clock
    /// depends on its inputs alone.
    pub(crate) memory: Option<kthena_memnet::MemNet>,
    /// The threads serving the inference listeners' connections (`None`: the runtime that
    /// started the router serves them), see [`crate::server::serving`].
    pub(crate) serving: Option<Arc<crate::server::serving::ServingThreads>>,
    /// The requests held while their ModelServer has no ready endpoint (`coldStart:`).
    pub(crate) cold_start: crate::coldstart::Hold,
    rng: Mutex<SmallRng>,
}

impl Shared {
    /// Shared state around a first snapshot.
    #[must_use]
    pub fn new(
        snapshot: Snapshot,
        client: HttpClient,
        metrics: Arc<Metrics>,
        access_log: Arc<AccessLog>,
        max_body_bytes: usize,
    ) -> Self {
        let seed = crate::sched::clock_seed();
        let body_budget = crate::body::BodyBudget::new(
            crate::body::default_body_budget(max_body_bytes),
            metrics.listener.buffered_body_bytes(),
        );
        let cold_start = crate::coldstart::Hold::new(metrics.cold_start.clone());
        // The first snapshot's ModelServers are idle from now (later ones from when they
        // appear).
        metrics
            .cold_start
            .know(snapshot.servers.keys().map(String::as_str));
        Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            client,
            metrics,
            access_log,
            max_body_bytes,
            ready: AtomicBool::new(false),
            synced: AtomicBool::new(true),
            listener: ListenerConfig::default(),
            body_budget,
            upstream_idle_timeout: None,
            overload: OverloadConfig::default(),
            admission: admission(&OverloadConfig::default()),
            auth: None,
            auth_cfg: crate::auth::AuthConfig::default(),
            conn_budget: crate::server::listener::ConnBudget::from_open_files_limit(),
            rate_limits: crate::ratelimit::RateLimits::default(),
            gateway: Arc::default(),
            queues: std::sync::OnceLock::new(),
            in_flight_share: std::sync::OnceLock::new(),
            drain_cut: tokio_util::sync::CancellationToken::new(),
            memory: None,
            serving: None,
            cold_start,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }
}

impl Shared {
    /// Makes `snap` the routing snapshot and drops the breaker series of endpoints it no
    /// longer has.
    pub(crate) fn store_snapshot(&self, snap: Arc<Snapshot>) {
        let names: std::collections::HashSet<(&str, &str)> = snap
            .endpoints
            .iter()
            .map(|e| (e.namespace.as_str(), e.name.as_str()))
            .collect();
        self.metrics
            .overload
            .retain_endpoints(|ns, name| names.contains(&(ns, name)));
        snap.kv.owners.note_endpoints(&snap.endpoints);
        let stored = Arc::clone(&snap);
        self.snapshot.store(snap);
        // After the store: a request that checked the old snapshot is in the hold by now.
        self.cold_start.on_snapshot(&stored);
    }

    /// Seeds the random draws of route weights and P/D rooms (from the clock otherwise).
    #[must_use]
    pub fn with_seed(self, seed: u64) -> Self {
        match self.rng.lock() {
            Ok(mut g) => *g = SmallRng::seed_from_u64(seed),
            Err(p) => *p.into_inner() = SmallRng::seed_from_u64(seed),
        }
        self
    }

    /// Runs blocking work `f`: on tokio's blocking pool, or inline on the in-memory network
    /// (where a second thread would make the order of events depend on the machine). `None`
    /// when the pool task panicked; inline, a panic unwinds the caller.
    pub(crate) async fn blocking<T, F>(&self, f: F) -> Option<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if self.memory.is_some() {
            return Some(f());
        }
        tokio::task::spawn_blocking(f).await.ok()
    }

    /// Sets the listener settings (body read timeouts and body budget; the default
    /// otherwise).
    #[must_use]
    pub fn with_listener(mut self, listener: ListenerConfig) -> Self {
        let budget = listener
            .max_buffered_body_bytes
            .unwrap_or_else(|| crate::body::default_body_budget(self.max_body_bytes));
        self.body_budget =
            crate::body::BodyBudget::new(budget, self.metrics.listener.buffered_body_bytes());
        self.listener = listener;
        self
    }

    /// Sets the upstream body idle timeout (`0` = none, the default).
    #[must_use]
    pub fn with_upstream_idle_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.upstream_idle_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// Sets the `coldStart:` settings (the default otherwise).
    #[must_use]
    pub fn with_cold_start(self, cfg: crate::coldstart::config::ColdStartConfig) -> Self {
        self.cold_start.set_config(cfg);
        self
    }

    /// Sets the overload protection settings (the default otherwise).
    #[must_use]
    pub fn with_overload(mut self, overload: OverloadConfig) -> Self {
        self.admission = admission(&overload);
        self.overload = overload;
        self
    }

    /// Turns on JWT authentication of `/v1/*` when `auth.jwksUri` is set (the key set is
    /// fetched by [`crate::auth::Authenticator::run`]).
    #[must_use]
    pub fn with_auth(mut self, auth: &crate::auth::AuthConfig) -> Self {
        self.auth = crate::auth::Authenticator::new(auth);
        self.auth_cfg = auth.clone();
        self
    }

    /// The random source of weighted route targets.
    pub(crate) fn rng(&self) -> MutexGuard<'_, SmallRng> {
        match self.rng.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

fn admission(cfg: &OverloadConfig) -> Option<Arc<Semaphore>> {
    (cfg.max_in_flight > 0).then(|| Arc::new(Semaphore::new(cfg.max_in_flight)))
}
