//! Engine endpoints (the stand-ins for Pods) and their live state: in-flight count and the
//! last scraped engine metrics.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use kthena_api::networking::InferenceEngine;
use kthena_sched::{Candidate, EndpointId, LoadGuard, LoadTracker, Metrics};
use tokio::time::Instant;

use crate::config::EndpointConfig;
use crate::upstream::overload::Breaker;

/// Consecutive failed scrapes after which an endpoint is no longer offered to the scheduler
/// (while at least one other endpoint of the server is up).
pub(crate) const DOWN_AFTER_FAILURES: u32 = 3;

/// One engine instance. Shared by every snapshot that contains it, so its in-flight count and
/// metrics survive reloads as long as its name and address stay the same.
#[derive(Debug)]
pub struct Endpoint {
    /// Unique name (the "pod name").
    pub name: String,
    /// Namespace of the stand-in Pod.
    pub namespace: String,
    /// `host:port` as configured (used as the URI authority).
    pub address: String,
    /// The resolved socket address.
    pub socket: SocketAddr,
    /// Labels for `workloadSelector.matchLabels`.
    pub labels: BTreeMap<String, String>,
    /// Optional KV-events address (`tcp://host:port`).
    pub kv_events: Option<String>,
    /// Optional KV-events replay address (`tcp://host:port`).
    pub kv_events_replay: Option<String>,
    /// Cluster mode: the pod's incarnation (`{uid}/{restarts}`), see
    /// [`EndpointConfig::incarnation`].
    pub incarnation: Option<String>,
    /// Cluster mode: Unix seconds of the newest running container's start, see
    /// [`EndpointConfig::container_started`].
    pub container_started: Option<i64>,
    /// Scheduler id (`namespace/name`).
    pub id: EndpointId,
    /// The router's own in-flight, awaiting-first-token and pending-prefill counts.
    load: Arc<LoadTracker>,
    /// Requests in flight here from every router (Redis-shared counts, the `inflight` module);
    /// `-1` while unknown.
    shared_in_flight: AtomicI64,
    state: Mutex<EngineState>,
    breaker: Breaker,
}

/// The last known engine metrics of an endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineState {
    /// Engine used to read the metrics (that of the first ModelServer selecting it).
    pub engine: Option<InferenceEngine>,
    /// Requests running in the engine.
    pub running: u32,
    /// Requests waiting in the engine.
    pub waiting: u32,
    /// KV-cache usage ratio `0..=1`.
    pub kv_cache_usage: f64,
    /// Mean TTFT over the last interval with observations, ms.
    pub ttft_ms: Option<f64>,
    /// Mean TPOT over the last interval with observations, ms.
    pub tpot_ms: Option<f64>,
    /// Model ids from `GET /v1/models` (base model first, then LoRA adapters).
    pub models: Vec<String>,
    /// The LoRA adapters among `models`: the cards with a `parent` (vLLM), else every id
    /// after the first. Also updated by load/unload calls proxied through the router.
    pub lora_adapters: Vec<String>,
    /// The last scrape failed: the values above are the last good ones.
    pub stale: bool,
    /// At least one scrape succeeded.
    pub scraped: bool,
    /// `GET /v1/models` answered at least once: `models` and `lora_adapters` are the
    /// engine's, not empty because nothing was read yet.
    pub models_known: bool,
    /// Scrapes failed in a row.
    pub consecutive_failures: u32,
    /// Time of the last good scrape.
    pub last_ok: Option<Instant>,
    /// Previous `(sum, count)` of the TTFT histogram.
    pub prev_ttft: Option<(f64, f64)>,
    /// Previous `(sum, count)` of the TPOT histogram.
    pub prev_tpot: Option<(f64, f64)>,
}

// === impl Endpoint ===

impl Endpoint {
    /// Builds an endpoint from its config (the address must have been validated).
    ///
    /// # Errors
    /// [`Error::BadAddress`] or [`Error::AddressUnresolved`] when the address does not
    /// resolve.
    pub fn from_config(cfg: &EndpointConfig) -> Result<Self, crate::Error> {
        let socket = crate::config::resolve_address(&cfg.address)?;
        Ok(Self {
            name: cfg.name.clone(),
            namespace: cfg.namespace.clone(),
            address: cfg.address.clone(),
            socket,
            labels: cfg.labels.clone(),
            kv_events: cfg.kv_events.clone(),
            kv_events_replay: cfg.kv_events_replay.clone(),
            incarnation: cfg.incarnation.clone(),
            container_started: cfg.container_started,
            id: EndpointId::new(format!("{}/{}", cfg.namespace, cfg.name)),
            load: Arc::new(LoadTracker::new()),
            shared_in_flight: AtomicI64::new(-1),
            state: Mutex::new(EngineState::default()),
            breaker: Breaker::default(),
        })
    }

    /// Whether this endpoint was built from the same name, namespace, address, KV-event
    /// addresses and pod incarnation (a restarted engine is a new endpoint).
    #[must_use]
    pub fn same_as(&self, cfg: &EndpointConfig) -> bool {
        self.name == cfg.name
            && self.namespace == cfg.namespace
            && self.address == cfg.address
            && self.kv_events == cfg.kv_events
            && self.kv_events_replay == cfg.kv_events_replay
            && self.incarnation == cfg.incarnation
            && self.container_started == cfg.container_started
    }

    /// The base URL `http://host:port`.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Requests the router currently has open to this endpoint.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.load.in_flight()
    }

    /// Requests in flight here from every router sharing counts through Redis (the last
    /// count Redis gave), `None` without one.
    #[must_use]
    pub fn shared_in_flight(&self) -> Option<u32> {
        u32::try_from(self.shared_in_flight.load(Ordering::Relaxed)).ok()
    }

    /// Records the count Redis gave (`None`: unknown, the router's own count is used).
    pub(crate) fn set_shared_in_flight(&self, v: Option<i64>) {
        self.shared_in_flight
            .store(v.map_or(-1, |v| v.max(0)), Ordering::Relaxed);
    }

    /// The in-flight count the scheduler sees: the shared count when known (at least the
    /// router's own), else the router's own.
    fn scheduler_in_flight(&self) -> u32 {
        let own = self.in_flight();
        self.shared_in_flight().map_or(own, |s| s.max(own))
    }

    /// Requests sent to this endpoint that have not yet returned a response body byte.
    #[must_use]
    pub fn awaiting_first_token(&self) -> u32 {
        self.load.awaiting_first_token()
    }

    /// Prompt tokens those requests still have to prefill (estimated when each was sent).
    #[must_use]
    pub fn pending_prefill_tokens(&self) -> u64 {
        self.load.pending_prefill_tokens()
    }

    /// Counts one more open request that has `prefill_tokens` prompt tokens to prefill here
    /// (kthena-sched's [`LoadTracker`] protocol): the guard gives the prefill part back at
    /// [`LoadGuard::first_byte`] (or on drop), the request when dropped.
    pub fn begin_request(&self, prefill_tokens: u64) -> LoadGuard {
        self.load.begin(prefill_tokens)
    }

    /// Locks the engine state (short critical sections only).
    pub fn state(&self) -> MutexGuard<'_, EngineState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Whether the scheduler may use the endpoint: fewer than [`DOWN_AFTER_FAILURES`]
    /// failed scrapes in a row.
    #[must_use]
    pub fn is_up(&self) -> bool {
        self.state().consecutive_failures < DOWN_AFTER_FAILURES
    }

    /// The circuit breaker fed by the results of requests sent here (connect errors and
    /// 5xx answers); the scrape-based [`Endpoint::is_up`] is the other health signal.
    #[must_use]
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether the engine lists LoRA adapter `name` as loaded.
    #[must_use]
    pub fn has_lora(&self, name: &str) -> bool {
        self.state().lora_adapters.iter().any(|a| a == name)
    }

    /// Records that LoRA adapter `name` is loaded (`loaded`) or not, as the engine's load or
    /// unload answer (or its 404 for the adapter) says; the next scrape replaces the list.
    pub fn set_lora(&self, name: &str, loaded: bool) {
        let mut st = self.state();
        st.lora_adapters.retain(|a| a != name);
        st.models.retain(|m| m != name);
        if loaded {
            st.lora_adapters.push(name.to_owned());
            st.models.push(name.to_owned());
        }
    }

    /// The scheduler's view of the endpoint: id, model list, metrics with units.
    #[must_use]
    pub fn candidate(&self) -> Candidate {
        let st = self.state();
        let base = st
            .models
            .iter()
            .find(|m| !st.lora_adapters.contains(m))
            .cloned()
            .unwrap_or_default();
        let mut metrics = Metrics {
            running_requests: st.running,
            waiting_requests: st.waiting,
            kv_cache_usage: st.kv_cache_usage,
            ttft_ms: st.ttft_ms,
            tpot_ms: st.tpot_ms,
            ..Metrics::default()
        };
        self.load.fill(&mut metrics);
        metrics.in_flight = self.scheduler_in_flight();
        Candidate::new(self.id.clone(), base)
            .with_lora_adapters(st.lora_adapters.iter().cloned())
            .with_metrics(metrics)
    }
}
