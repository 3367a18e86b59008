//! Go Kthena's prefill/decode phase families (`pkg/kthena-router/metrics/metrics.go`),
//! with Go's names and labels:
//!
//! | family | type | labels | meaning |
//! |---|---|---|---|
//! | `kthena_router_request_prefill_duration_seconds` | histogram | `model`, `path`, `status_code` | one prefill call, send to the end of its answer |
//! | `kthena_router_request_decode_duration_seconds` | histogram | `model`, `path`, `status_code` | one decode call, send to the end of the streamed answer |
//!
//! `status_code` is `200` for a phase that succeeded and `500` for one that failed, as in
//! Go Kthena (not the engine's status). Buckets: those of
//! `kthena_router_request_duration_seconds`, passed in by the router's `Metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    model: String,
    path: String,
    status_code: String,
}

/// Builds phase histograms with the router's request-duration buckets (seconds).
#[derive(Debug, Clone, Copy)]
struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

type HistFamily<L> = Family<L, Histogram, Buckets>;

/// A prefill/decode phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The prefill call.
    Prefill,
    /// The decode call.
    Decode,
}

/// The prefill/decode phase histograms.
#[derive(Debug, Clone)]
pub struct PdMetrics {
    prefill: HistFamily<PhaseLabels>,
    decode: HistFamily<PhaseLabels>,
}

impl PdMetrics {
    /// Creates the families with `buckets` (seconds) and registers them into `registry`.
    pub(crate) fn register(registry: &mut Registry, buckets: &'static [f64]) -> Self {
        let prefill = HistFamily::<PhaseLabels>::new_with_constructor(Buckets(buckets));
        let decode = HistFamily::<PhaseLabels>::new_with_constructor(Buckets(buckets));
        registry.register(
            "kthena_router_request_prefill_duration_seconds",
            "Prefill phase latency of prefill/decode disaggregated requests in seconds",
            prefill.clone(),
        );
        registry.register(
            "kthena_router_request_decode_duration_seconds",
            "Decode phase latency of prefill/decode disaggregated requests in seconds",
            decode.clone(),
        );
        Self { prefill, decode }
    }

    /// Records one phase of `model` on `path` that took `secs` seconds.
    pub(crate) fn observe(&self, phase: Phase, model: &str, path: &str, ok: bool, secs: f64) {
        let labels = PhaseLabels {
            model: model.to_owned(),
            path: path.to_owned(),
            status_code: if ok { "200" } else { "500" }.to_owned(),
        };
        let family = match phase {
            Phase::Prefill => &self.prefill,
            Phase::Decode => &self.decode,
        };
        family.get_or_create(&labels).observe(secs);
    }
}
