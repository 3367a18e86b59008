use super::*;

#[test]
fn percentile_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&v, 0.5), 50.0);
    assert_eq!(percentile(&v, 0.99), 99.0);
    assert_eq!(percentile(&v, 1.0), 100.0);
    assert_eq!(percentile(&v, 0.0), 1.0);
    assert_eq!(percentile(&[], 0.5), 0.0);
}

#[test]
fn counters_from_metrics_text() {
    let text = "# HELP x\nvllm:request_success_total{finished_reason=\"length\"} 7\n\
                    vllm:request_success_total{finished_reason=\"stop\"} 3\n\
                    vllm:prefix_cache_queries_total{engine=\"0\"} 1000\n\
                    vllm:prefix_cache_hits_total{engine=\"0\"} 250\n\
                    vllm:num_preemptions_total 2\ngarbage\n";
    let c = EngineCounters::from_metrics_text(text);
    assert_eq!(
        c,
        EngineCounters {
            requests: 10,
            prefix_queries: 1000,
            prefix_hits: 250,
            preemptions: 2
        }
    );
}
