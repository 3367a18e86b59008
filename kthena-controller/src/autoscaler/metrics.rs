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
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP vllm:num_requests_waiting Waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 4.5
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0"} 100
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0"} 9.5
vllm:time_to_first_token_seconds_count{engine="0"} 100
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 10
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 100
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5"} 50
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 999
vllm:time_to_first_token_seconds_count{engine="1"} 999
# EOF
"#;

    #[test]
    fn gauges_and_counters_sum_their_series() {
        assert_eq!(
            family(TEXT, "vllm:num_requests_waiting"),
            Some(FamilyValue::Scalar(7.5))
        );
        assert_eq!(
            family(TEXT, "vllm:prompt_tokens"),
            Some(FamilyValue::Scalar(100.0))
        );
        assert_eq!(family(TEXT, "vllm:absent"), None);
    }

    #[test]
    fn histograms_keep_their_first_series_sorted() {
        let Some(FamilyValue::Histogram(h)) = family(TEXT, "vllm:time_to_first_token_seconds")
        else {
            panic!("no histogram");
        };
        assert_eq!((h.count, h.sum), (100, 9.5));
        assert_eq!(h.buckets, vec![(0.1, 10), (0.5, 50), (f64::INFINITY, 100)]);
    }

    /// Well-formed text whose value means nothing is reported as such, with its value.
    #[test]
    fn meaningless_values_are_invalid_not_summed() {
        let gauge =
            |v: &str| format!("# TYPE w gauge\nw{{engine=\"0\"}} 3\nw{{engine=\"1\"}} {v}\n");
        let cases = [
            ("NaN", InvalidSample::NotANumber),
            ("+Inf", InvalidSample::Infinite),
            ("-Inf", InvalidSample::Infinite),
            ("-1", InvalidSample::Negative),
            ("1e300", InvalidSample::TooLarge),
        ];
        for (text, why) in cases {
            match family(&gauge(text), "w") {
                Some(FamilyValue::Invalid(v, w)) => {
                    assert_eq!(w, why, "{text}");
                    assert!(v.is_nan() || v == text.replace("Inf", "inf").parse::<f64>().unwrap());
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        let hist = "# TYPE h histogram\nh_bucket{le=\"+Inf\"} NaN\nh_count 1\nh_sum 1\n";
        assert!(matches!(
            family(hist, "h"),
            Some(FamilyValue::Invalid(_, InvalidSample::NotANumber))
        ));
        assert_eq!(
            family(&gauge("1e15"), "w"),
            Some(FamilyValue::Scalar(1e15 + 3.0))
        );
    }

    #[test]
    fn garbage_is_no_value() {
        assert_eq!(
            family("<html>oops</html>", "vllm:num_requests_waiting"),
            None
        );
        assert_eq!(family("", "vllm:num_requests_waiting"), None);
        assert_eq!(
            family("vllm:num_requests_waiting x", "vllm:num_requests_waiting"),
            None
        );
    }
}
