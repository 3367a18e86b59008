use crate::engine::{SGLANG, VLLM, parse_metrics};

/// Captured from `llama-server --metrics` (llama.cpp 11434) after one chat request.
const SAMPLE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/llamacpp-metrics.txt"
));

#[test]
fn maps_real_llamacpp_output() {
    for names in [VLLM, SGLANG] {
        let s = parse_metrics(SAMPLE, names).unwrap();
        assert_eq!(s.running, 0.0);
        assert_eq!(s.waiting, 0.0);
        assert_eq!(s.kv_cache_usage, 0.0);
        assert_eq!(s.ttft, None);
        assert_eq!(s.tpot, Some((0.121914, 4.0)));
    }
    let busy = SAMPLE
        .replace(
            "llamacpp:requests_processing 0",
            "llamacpp:requests_processing 2",
        )
        .replace(
            "llamacpp:requests_deferred 0",
            "llamacpp:requests_deferred 5",
        );
    let s = parse_metrics(&busy, VLLM).unwrap();
    assert_eq!((s.running, s.waiting), (2.0, 5.0));
    // A vLLM answer is not mistaken for llama.cpp.
    assert!(
        super::llamacpp_sample(
            &prometheus_parse::Scrape::parse(std::iter::empty()).unwrap(),
            "_"
        )
        .is_none()
    );
}
