use super::*;

/// A real vLLM 0.32 answer (CPU build, after a few chat requests).
const SAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/vllm-0.32-metrics.txt"
));

#[test]
fn parses_real_vllm_output() {
    let s = parse_metrics(SAMPLE, VLLM).unwrap();
    assert_eq!(s.running, 0.0);
    assert_eq!(s.waiting, 0.0);
    assert_eq!(s.kv_cache_usage, 0.0);
    assert_eq!(s.ttft, Some((0.21722936630249023, 7.0)));
    assert_eq!(s.tpot, Some((0.2923087659992234, 26.0)));
    // The SGLang names are absent from a vLLM answer: zeros, no histograms.
    let s = parse_metrics(SAMPLE, SGLANG).unwrap();
    assert_eq!(s, EngineSample::default());
}

#[test]
fn the_kept_lines_give_the_sample_of_the_whole_answer() {
    let busy = SAMPLE
        .replace(
            "vllm:num_requests_running{engine=\"0\",model_name=\"tiny-qwen3\"} 0.0",
            "vllm:num_requests_running{engine=\"0\",model_name=\"tiny-qwen3\"} 3.0\n\
             vllm:num_requests_running{engine=\"1\",model_name=\"tiny-qwen3\"} 4.0",
        )
        .replace(
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny-qwen3\"} 0.0",
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny-qwen3\"} 0.25",
        );
    let llamacpp = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llamacpp-metrics.txt"
    ));
    for text in [SAMPLE, busy.as_str(), llamacpp] {
        for names in [VLLM, SGLANG] {
            let whole = sample_of(&parse_lines(text.lines()).unwrap(), names);
            assert_eq!(parse_metrics(text, names).unwrap(), whole);
        }
    }
    let s = parse_metrics(&busy, VLLM).unwrap();
    assert_eq!(
        (s.running, s.kv_cache_usage),
        (4.0, 0.25),
        "the last series"
    );
    // Of the 661 lines of the vLLM answer, the gauges with their TYPE lines and the
    // histograms' _sum and _count go through the parser.
    assert_eq!(SAMPLE.lines().count(), 661);
    assert_eq!(SAMPLE.lines().filter(|l| VLLM.keeps(l)).count(), 10);
    // An answer without any of the families is still an answer (zeros), text without a
    // sample still is not.
    let other = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n";
    assert_eq!(parse_metrics(other, VLLM).unwrap(), EngineSample::default());
}

#[test]
fn parses_sglang_names() {
    let text = "# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"q\"} 0.42\n\
                sglang:num_queue_reqs{model_name=\"q\"} 3\nsglang:num_running_reqs{model_name=\"q\"} 7\n\
                sglang:time_to_first_token_seconds_sum 2.5\nsglang:time_to_first_token_seconds_count 5\n\
                sglang:inter_token_latency_seconds_sum 0.5\nsglang:inter_token_latency_seconds_count 50\n";
    let s = parse_metrics(text, SGLANG).unwrap();
    assert_eq!(s.kv_cache_usage, 0.42);
    assert_eq!((s.waiting, s.running), (3.0, 7.0));
    assert_eq!(s.ttft, Some((2.5, 5.0)));
    assert_eq!(s.tpot, Some((0.5, 50.0)));
}

#[test]
fn the_last_series_of_each_family() {
    let text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 3\nvllm:num_requests_waiting{engine=\"1\"} 4\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.25\nvllm:time_to_first_token_seconds_sum 1.0\nvllm:time_to_first_token_seconds_count 10\n";
    let s = parse_metrics(text, VLLM).unwrap();
    assert_eq!((s.waiting, s.running, s.kv_cache_usage), (4.0, 2.0, 0.25));
    assert_eq!(s.ttft, Some((1.0, 10.0)));
    assert_eq!(s.tpot, None);
}

#[test]
fn text_without_a_sample_is_an_error() {
    let e = parse_metrics("<html>oops</html>", VLLM).unwrap_err();
    assert!(matches!(e, Error::NoMetricSample), "{e:?}");
    assert_eq!(e.to_string(), "unparsable metrics: no sample found");
}

#[test]
fn histogram_deltas() {
    assert_eq!(interval_mean_ms(None, (1.0, 10.0)), None);
    assert_eq!(interval_mean_ms(Some((1.0, 10.0)), (1.0, 10.0)), None);
    assert_eq!(
        interval_mean_ms(Some((1.0, 10.0)), (1.5, 12.0)),
        Some(250.0)
    );
    // restart: counters went down
    assert_eq!(interval_mean_ms(Some((5.0, 50.0)), (0.2, 2.0)), Some(100.0));
}
