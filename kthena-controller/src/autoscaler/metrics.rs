//! Reading one metric family out of an engine's Prometheus text answer (Go
//! `metric_collector.go`: counters and gauges summed over their series, histograms as the
//! first series' cumulative buckets). A sample value of the family that
//! `kthena_autoscale::check_sample` refuses (NaN, ±Inf, negative, above 1e15) makes the whole
//! family [`FamilyValue::Invalid`].

use kthena_autoscale::{Histogram, InvalidSample, check_sample};
use kthena_engine_metrics::Family;

/// One family's value in one scrape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FamilyValue {
    /// Counter, gauge or untyped: the sum over all series.
    Scalar(f64),
    /// The first series of a histogram.
    Histogram(Histogram),
    /// A sample of the family (the first such) is no usable value: its value and why.
    Invalid(f64, InvalidSample),
}

/// The samples of `family` in `text` (Prometheus text format or OpenMetrics): `None` when the
/// text has no such family, or is not metrics text at all (read by
/// [`kthena_engine_metrics::family`], every sample checked with [`check_sample`]).
pub(crate) fn family(text: &str, family: &str) -> Option<FamilyValue> {
    Some(
        match kthena_engine_metrics::family(text, family, check_sample)? {
            Family::Scalar(v) => FamilyValue::Scalar(v),
            Family::Histogram(h) => {
                FamilyValue::Histogram(Histogram::new(h.count, h.sum, h.buckets))
            }
            Family::Invalid(v, why) => FamilyValue::Invalid(v, why),
        },
    )
}

#[cfg(test)]
mod tests;
