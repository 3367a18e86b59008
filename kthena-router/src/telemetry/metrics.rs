//! The router's Prometheus metrics: the `kthena_router_*` families of Go Kthena
//! (`pkg/kthena-router/metrics/metrics.go`), encoded with `prometheus-client`.

use std::sync::{Arc, LazyLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::telemetry::label_hash::folded_hash;
use crate::telemetry::path_label::path_label;

/// Request latency buckets in seconds (Go's `metrics.go`).
pub(crate) const DURATION_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Match-ratio buckets, ratios 0..1 (Go's `metrics.go`).
pub(crate) const RATIO_BUCKETS: [f64; 9] = [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0];

/// A label value taken from configuration or a request (a route, server or model name):
/// shared, so recording a request's metrics copies no string.
pub(crate) type LabelValue = Arc<str>;

/// The shared `none` label value.
static NONE: LazyLock<LabelValue> = LazyLock::new(|| Arc::from("none"));
/// The shared `unknown` label value (a model no route knows).
static UNKNOWN: LazyLock<LabelValue> = LazyLock::new(|| Arc::from("unknown"));

/// The `none` label value (no route, server or upstream model yet).
#[must_use]
pub(crate) fn none_label() -> LabelValue {
    Arc::clone(&NONE)
}

/// The `unknown` label value (the model label of a model no route knows).
#[must_use]
pub(crate) fn unknown_label() -> LabelValue {
    Arc::clone(&UNKNOWN)
}

/// Destination labels shared by several families; placeholders `none`/`unresolved` until
/// the route is known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// `namespace/name` of the ModelRoute or `none`.
    pub model_route: LabelValue,
    /// `model_server`, `external_provider`, `inference_pool` or `unresolved`.
    pub backend_type: &'static str,
    /// `namespace/name` of the ModelServer (provider, pool) or `none`.
    pub backend_name: LabelValue,
    /// The model sent upstream or `none`.
    pub upstream_model: LabelValue,
}

impl Default for Destination {
    /// The unresolved placeholders.
    fn default() -> Self {
        Self {
            model_route: none_label(),
            backend_type: "unresolved",
            backend_name: none_label(),
            upstream_model: none_label(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    model: LabelValue,
    path: &'static str,
    status_code: u16,
    error_type: &'static str,
    model_route: LabelValue,
    backend_type: &'static str,
    backend_name: LabelValue,
    upstream_model: LabelValue,
}

#[derive(Debug, Clone, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    model: LabelValue,
    path: &'static str,
    status_code: u16,
    model_route: LabelValue,
    backend_type: &'static str,
    backend_name: LabelValue,
    upstream_model: LabelValue,
}

#[derive(Debug, Clone, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: LabelValue,
    path: &'static str,
    token_type: &'static str,
    model_route: LabelValue,
    backend_type: &'static str,
    backend_name: LabelValue,
    upstream_model: LabelValue,
}

#[derive(Debug, Clone, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: LabelValue,
}

#[derive(Debug, Clone, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    model_server: LabelValue,
    model_route: LabelValue,
    backend_type: &'static str,
    backend_name: LabelValue,
    upstream_model: LabelValue,
}

folded_hash!(RequestLabels: model, path, status_code, error_type,
    model_route, backend_type, backend_name, upstream_model);
folded_hash!(DurationLabels: model, path, status_code,
    model_route, backend_type, backend_name, upstream_model);
folded_hash!(TokenLabels: model, path, token_type,
    model_route, backend_type, backend_name, upstream_model);
folded_hash!(ModelLabel: model);
folded_hash!(UpstreamLabels: model_server,
    model_route, backend_type, backend_name, upstream_model);

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The router's metric families and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: HistFamily<DurationLabels>,
    tokens: Family<TokenLabels, Counter>,
    active_requests: Gauge,
    active_downstream: Family<ModelLabel, Gauge>,
    active_upstream: Family<UpstreamLabels, Gauge>,
    prefix_match: HistFamily<ModelLabel>,
    kv_match: HistFamily<ModelLabel>,
    reloads: Family<ResultLabel, Counter>,
    config_warnings: Family<KindLabel, Gauge>,
    auth_failures: Family<ReasonLabel, Counter>,
    /// Access-log entries dropped because the output fell behind (`accesslog`).
    pub(crate) access_log_dropped: Counter,
    /// KV-event, KV-index and tokenization families (`kv::metrics`).
    pub kv: crate::kv::metrics::KvMetrics,
    /// Listener families: client timeouts, open connections (`listener`).
    pub listener: crate::server::listener::ListenerMetrics,
    /// Overload families: shed requests, circuit breaker state (`overload`).
    pub overload: crate::upstream::overload::OverloadMetrics,
    /// Fairness and session-boost queue families (`queue`).
    pub queue: crate::queue::QueueMetrics,
    /// Go's scheduler-plugin families (`plugin_metrics`).
    pub plugins: crate::telemetry::plugin_metrics::PluginMetrics,
    /// Go's prefill/decode phase families (`pd`).
    pub pd: crate::pd::metrics::PdMetrics,
    /// Token rate limit rejections (`ratelimit`).
    pub(crate) rate_limit: crate::ratelimit::RateLimitMetrics,
    /// Held requests and ModelServer idle time (`coldstart`).
    pub(crate) cold_start: crate::coldstart::metrics::ColdStartMetrics,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

/// One finished request, as recorded in the request, duration and token families.
#[derive(Debug, Clone)]
pub struct RequestRecord<'a> {
    /// The model label (`unknown` when no route knows it).
    pub model: &'a LabelValue,
    /// Raw request path.
    pub path: &'a str,
    /// Status sent to the client.
    pub status: u16,
    /// Finish reason; `None` gives `successful_request` (< 400) or `request_failed`.
    pub error_type: Option<&'static str>,
    /// Destination labels.
    pub dest: &'a Destination,
    /// Seconds from request start to the end of the response.
    pub duration_secs: f64,
    /// Estimated or reported input tokens.
    pub input_tokens: u64,
    /// Output tokens reported by the engine.
    pub output_tokens: u64,
}

fn duration_hist() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn ratio_hist() -> Histogram {
    Histogram::new(RATIO_BUCKETS)
}

// === impl Metrics ===

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every family.
    #[must_use]
    pub fn new() -> Self {
        // The subsystems' families first, then the router's own: the exposition order.
        let mut registry = Registry::default();
        let kv = crate::kv::metrics::KvMetrics::register(&mut registry);
        let listener = crate::server::listener::ListenerMetrics::register(&mut registry);
        let overload = crate::upstream::overload::OverloadMetrics::register(&mut registry);
        let queue = crate::queue::QueueMetrics::register(&mut registry);
        let plugins = crate::telemetry::plugin_metrics::PluginMetrics::register(&mut registry);
        let pd = crate::pd::metrics::PdMetrics::register(&mut registry, &DURATION_BUCKETS);
        let rate_limit = crate::ratelimit::RateLimitMetrics::register(&mut registry);
        let cold_start = crate::coldstart::metrics::ColdStartMetrics::register(&mut registry);
        let m = Self {
            registry: Registry::default(),
            requests: Family::<RequestLabels, Counter>::default(),
            duration: HistFamily::<DurationLabels>::new_with_constructor(duration_hist),
            tokens: Family::<TokenLabels, Counter>::default(),
            active_requests: Gauge::default(),
            active_downstream: Family::<ModelLabel, Gauge>::default(),
            active_upstream: Family::<UpstreamLabels, Gauge>::default(),
            prefix_match: HistFamily::<ModelLabel>::new_with_constructor(ratio_hist),
            kv_match: HistFamily::<ModelLabel>::new_with_constructor(ratio_hist),
            reloads: Family::<ResultLabel, Counter>::default(),
            config_warnings: Family::<KindLabel, Gauge>::default(),
            auth_failures: Family::<ReasonLabel, Counter>::default(),
            access_log_dropped: Counter::default(),
            kv,
            listener,
            overload,
            queue,
            plugins,
            pd,
            rate_limit,
            cold_start,
        };
        m.register_own(&mut registry);
        Self { registry, ..m }
    }

    /// Registers the router's own families (`kthena_router_*` outside the subsystems).
    fn register_own(&self, registry: &mut Registry) {
        registry.register(
            "kthena_router_config_warnings",
            "Problems of the loaded configuration by kind (see docs/router.md)",
            self.config_warnings.clone(),
        );
        registry.register(
            "kthena_router_auth_failures",
            "Requests refused by authentication or authorization, by reason (not in Go Kthena)",
            self.auth_failures.clone(),
        );
        registry.register(
            "kthena_router_config_reloads",
            "Configuration and manifest reloads by result (success, failure)",
            self.reloads.clone(),
        );
        registry.register(
            "kthena_router_requests",
            "Total number of requests handled by the router",
            self.requests.clone(),
        );
        registry.register(
            "kthena_router_request_duration_seconds",
            "End-to-end request latency in seconds",
            self.duration.clone(),
        );
        registry.register(
            "kthena_router_tokens",
            "Total number of input and output tokens",
            self.tokens.clone(),
        );
        registry.register(
            "kthena_router_active_requests",
            "Requests being handled by the router",
            self.active_requests.clone(),
        );
        registry.register(
            "kthena_router_active_downstream_requests",
            "Client requests in flight per model",
            self.active_downstream.clone(),
        );
        registry.register(
            "kthena_router_active_upstream_requests",
            "Upstream requests in flight per destination",
            self.active_upstream.clone(),
        );
        registry.register(
            "kthena_router_prefix_cache_match_ratio",
            "Longest matched prefix over total prompt blocks (prefix-cache plugin)",
            self.prefix_match.clone(),
        );
        registry.register(
            "kthena_router_kvcache_aware_match_ratio",
            "Longest matched KV block prefix over total blocks (kvcache-aware plugin)",
            self.kv_match.clone(),
        );
        registry.register(
            "kthena_router_access_log_dropped",
            "Access-log entries dropped because the output fell behind (32,768 waiting)",
            self.access_log_dropped.clone(),
        );
    }

    /// Records a finished request: `requests_total` +1, one duration observation, and the
    /// token counters (input, and output when > 0).
    pub fn record_request(&self, r: &RequestRecord<'_>) {
        let error_type = r.error_type.unwrap_or(if r.status < 400 {
            "successful_request"
        } else {
            "request_failed"
        });
        let (d, path) = (r.dest, path_label(r.path));
        self.requests
            .get_or_create(&RequestLabels {
                model: Arc::clone(r.model),
                path,
                status_code: r.status,
                error_type,
                model_route: Arc::clone(&d.model_route),
                backend_type: d.backend_type,
                backend_name: Arc::clone(&d.backend_name),
                upstream_model: Arc::clone(&d.upstream_model),
            })
            .inc();
        self.duration
            .get_or_create(&DurationLabels {
                model: Arc::clone(r.model),
                path,
                status_code: r.status,
                model_route: Arc::clone(&d.model_route),
                backend_type: d.backend_type,
                backend_name: Arc::clone(&d.backend_name),
                upstream_model: Arc::clone(&d.upstream_model),
            })
            .observe(r.duration_secs);
        for (kind, n) in [("input", r.input_tokens), ("output", r.output_tokens)] {
            if n == 0 {
                continue;
            }
            self.tokens
                .get_or_create(&TokenLabels {
                    model: Arc::clone(r.model),
                    path,
                    token_type: kind,
                    model_route: Arc::clone(&d.model_route),
                    backend_type: d.backend_type,
                    backend_name: Arc::clone(&d.backend_name),
                    upstream_model: Arc::clone(&d.upstream_model),
                })
                .inc_by(n);
        }
    }

    /// `kthena_router_active_requests` ±1.
    pub fn active_requests(&self, delta: i64) {
        self.active_requests.inc_by(delta);
    }

    /// `kthena_router_active_downstream_requests{model}` ±1.
    pub fn active_downstream(&self, model: &LabelValue, delta: i64) {
        self.active_downstream
            .get_or_create(&ModelLabel {
                model: Arc::clone(model),
            })
            .inc_by(delta);
    }

    /// `kthena_router_active_upstream_requests{...}` ±1.
    pub fn active_upstream(&self, d: &Destination, delta: i64) {
        let model_server = if d.backend_type == "model_server" {
            Arc::clone(&d.backend_name)
        } else {
            none_label()
        };
        self.active_upstream
            .get_or_create(&UpstreamLabels {
                model_server,
                model_route: Arc::clone(&d.model_route),
                backend_type: d.backend_type,
                backend_name: Arc::clone(&d.backend_name),
                upstream_model: Arc::clone(&d.upstream_model),
            })
            .inc_by(delta);
    }

    /// Counts a reload attempt (`kthena_router_config_reloads_total{result}`).
    pub fn reload(&self, ok: bool) {
        let result = if ok { "success" } else { "failure" };
        self.reloads
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }

    /// Sets `kthena_router_config_warnings{kind}` to the count of each kind in `warnings`
    /// (0 for the kinds absent), after a load or reload.
    pub fn config_warnings(&self, warnings: &[crate::discovery::warnings::ConfigWarning]) {
        for kind in crate::discovery::warnings::WARNING_KINDS {
            let n = warnings.iter().filter(|w| w.kind == kind).count();
            self.config_warnings
                .get_or_create(&KindLabel { kind: kind.into() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// One more request refused by authentication: `kthena_router_auth_failures_total{reason}`
    /// with `reason` one of `missing_token` (no `Authorization: Bearer` header),
    /// `invalid_token` (signature or claims refused), `keys_unavailable` (the JWKS not fetched
    /// yet, 503), `forbidden` (a LoRA admin call the caller may not make), `bad_header` (more
    /// than one `Authorization` header).
    pub fn auth_failed(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// Observes a scheduler plugin's match ratio (`prefix-cache` or `kvcache-aware`).
    pub fn match_ratio(&self, plugin: &str, model: &LabelValue, ratio: f64) {
        let fam = match plugin {
            "prefix-cache" => &self.prefix_match,
            "kvcache-aware" => &self.kv_match,
            _ => return,
        };
        fam.get_or_create(&ModelLabel {
            model: Arc::clone(model),
        })
        .observe(ratio);
    }

    /// The Prometheus text exposition of every family.
    #[must_use]
    pub fn encode(&self) -> String {
        // Idle `user_id` series of the fairness queue go before the page is written.
        self.queue.expire_idle_users();
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests;
