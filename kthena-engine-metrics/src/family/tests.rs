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

/// A check that accepts every value.
fn any(_: f64) -> Result<(), ()> {
    Ok(())
}

/// A check that refuses negative values.
fn non_negative(v: f64) -> Result<(), &'static str> {
    if v < 0.0 { Err("negative") } else { Ok(()) }
}

#[test]
fn gauges_and_counters_sum_their_series() {
    assert_eq!(
        family(TEXT, "vllm:num_requests_waiting", any),
        Some(Family::Scalar(7.5))
    );
    assert_eq!(
        family(TEXT, "vllm:prompt_tokens", any),
        Some(Family::Scalar(100.0))
    );
    assert_eq!(family(TEXT, "vllm:absent", any), None);
}

#[test]
fn histograms_keep_their_first_series_in_answer_order() {
    let h = HistogramSamples {
        count: 100,
        sum: 9.5,
        buckets: vec![(0.1, 10), (f64::INFINITY, 100), (0.5, 50)],
    };
    assert_eq!(
        family(TEXT, "vllm:time_to_first_token_seconds", any),
        Some(Family::Histogram(h))
    );
    // Without `_count` there is no histogram; a bucket without `le` spoils the answer.
    let no_count = "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n";
    assert_eq!(family(no_count, "h", any), None);
    let no_le = "# TYPE h histogram\nh_bucket{x=\"1\"} 1\nh_count 1\n";
    assert_eq!(family(no_le, "h", any), None);
}

#[test]
fn the_first_refused_value_ends_the_reading() {
    let text = "# TYPE w gauge\nw{a=\"0\"} 3\nw{a=\"1\"} -1\nw{a=\"2\"} -2\ngarbage\n";
    assert_eq!(
        family(text, "w", non_negative),
        Some(Family::Invalid(-1.0, "negative"))
    );
    let hist = "# TYPE h histogram\nh_bucket{le=\"+Inf\"} -5\nh_count 1\n";
    assert_eq!(
        family(hist, "h", non_negative),
        Some(Family::Invalid(-5.0, "negative"))
    );
    // Another family's values are not checked.
    let other = "# TYPE w gauge\nw 1\nv -1\n";
    assert_eq!(family(other, "w", non_negative), Some(Family::Scalar(1.0)));
}

#[test]
fn garbage_is_no_value() {
    assert_eq!(family("<html>oops</html>", "w", any), None);
    assert_eq!(family("", "w", any), None);
    assert_eq!(family("w x", "w", any), None);
    assert_eq!(family("w 1\nnot a sample\n", "w", any), None);
}

#[test]
fn real_answers() {
    let vllm = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/vllm-0.32-metrics.txt"
    ));
    assert_eq!(
        family(vllm, "vllm:num_requests_waiting", any),
        Some(Family::Scalar(0.0))
    );
    let Some(Family::Histogram(h)) = family(vllm, "vllm:time_to_first_token_seconds", any) else {
        panic!("no TTFT histogram");
    };
    assert_eq!((h.count, h.sum), (7, 0.21722936630249023));
    assert!(h.buckets.iter().any(|&(le, n)| le.is_infinite() && n == 7));
    let llamacpp = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llamacpp-metrics.txt"
    ));
    assert_eq!(
        family(llamacpp, "llamacpp:tokens_predicted_total", any),
        Some(Family::Scalar(4.0))
    );
}
