//! Plain data the host fills: endpoints, their metrics, the request view.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A stable, cheap-to-clone endpoint identifier (for Kubernetes hosts `namespace/pod`,
/// for others any unique string such as `host:port`).
///
/// Ordering is byte-wise on the string; the scheduler breaks score ties by this order
/// (smallest id first), so decisions are deterministic.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EndpointId(Arc<str>);

// === impl EndpointId ===

impl EndpointId {
    /// Creates an id from any string.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for EndpointId {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for EndpointId {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl Borrow<str> for EndpointId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Load and latency signals of one endpoint, as scraped from the engine plus the host's own
/// in-flight counter (Go Kthena `pkg/kthena-router/backend/*`,
/// `pkg/kthena-router/datastore/on_flight_counter.go`).
///
/// Every field has a neutral default (`0`, `None`), so a host fills only what it knows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// Requests the host has sent to this endpoint and not yet seen complete (router-tracked
    /// "on-flight" count of Go Kthena). Used by `least-request` scoring and `load-imbalance`.
    pub in_flight: u32,
    /// Requests the engine is running (`vllm:num_requests_running`, `sglang:num_running_reqs`).
    pub running_requests: u32,
    /// Requests queued in the engine (`vllm:num_requests_waiting`, `sglang:num_queue_reqs`).
    pub waiting_requests: u32,
    /// KV-cache usage as a ratio in `0.0..=1.0` (`vllm:kv_cache_usage_perc`,
    /// `sglang:token_usage`). Values outside the range are clamped by the plugins that read it.
    pub kv_cache_usage: f64,
    /// Mean time to first token in milliseconds over the last scrape interval; `None` (or a
    /// value `<= 0`) means "no data yet".
    pub ttft_ms: Option<f64>,
    /// Mean time per output token (inter-token latency) in milliseconds; `None` (or `<= 0`)
    /// means "no data yet".
    pub tpot_ms: Option<f64>,
    /// Requests the host has sent to this endpoint that have not yet returned their first
    /// response byte (host-tracked, like `in_flight`): the engine's prefill queue as seen
    /// from the router, without a scrape's delay.
    pub awaiting_first_token: u32,
    /// Prompt tokens those requests still have to prefill, in tokens: for each, its prompt
    /// length minus what the KV index said the endpoint held when it was sent
    /// ([`Scheduler::cached_tokens`](crate::Scheduler::cached_tokens)). Read by
    /// `least-prefill`.
    pub pending_prefill_tokens: u64,
}

/// The role of an endpoint in prefill/decode disaggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PdRole {
    /// Runs the prompt (prefill) phase and hands the KV cache over.
    Prefill,
    /// Runs the generation (decode) phase.
    Decode,
}

/// Membership of an endpoint in a prefill/decode group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdMember {
    /// Prefill or decode.
    pub role: PdRole,
    /// Value of the group key label (`ModelServer.spec.workloadSelector.pdGroup.groupKey`);
    /// a decode endpoint is only paired with prefill endpoints of the same value.
    pub group: String,
}

/// A snapshot of one endpoint the request could go to. Plain data: any proxy can build one.
///
/// The scheduler never retains a `Candidate`; plugins that keep state key it by [`EndpointId`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidate {
    /// Unique id; equal totals are ordered by it (see [`Decision::ranked`](crate::Decision)).
    pub id: EndpointId,
    /// Base model the endpoint serves (the first id of its `GET /v1/models`).
    pub model: String,
    /// LoRA adapters loaded on the endpoint (the other ids of `GET /v1/models`).
    pub lora_adapters: Vec<String>,
    /// Load and latency signals.
    pub metrics: Metrics,
    /// Prefill/decode role and group; `None` for an aggregated endpoint.
    pub pd: Option<PdMember>,
    /// Free-form labels (for example the pod's labels); not read by built-in plugins.
    pub labels: BTreeMap<String, String>,
}

// === impl Candidate ===

impl Candidate {
    /// A candidate with the given id and base model and default (idle, no data) metrics.
    pub fn new(id: impl Into<EndpointId>, model: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            model: model.into(),
            ..Self::default()
        }
    }

    /// Sets the metrics.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Sets the loaded LoRA adapters.
    #[must_use]
    pub fn with_lora_adapters<I, S>(mut self, adapters: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.lora_adapters = adapters.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the prefill/decode role and group.
    #[must_use]
    pub fn with_pd(mut self, role: PdRole, group: impl Into<String>) -> Self {
        self.pd = Some(PdMember {
            role,
            group: group.into(),
        });
        self
    }

    /// Whether the endpoint serves `name` as its base model or as a loaded LoRA adapter
    /// (Go Kthena's model list from `GET /v1/models`).
    pub fn serves(&self, name: &str) -> bool {
        self.model == name || self.lora_adapters.iter().any(|a| a == name)
    }
}
