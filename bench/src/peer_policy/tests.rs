use super::*;

#[test]
fn rows_are_named_after_program_and_policy() {
    let names: Vec<String> = PeerPolicy::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(
        names,
        [
            "smg cache_aware",
            "smg round_robin",
            "smg random",
            "vllm-router cache_aware",
            "vllm-router random",
            "vllm-router kv_aware"
        ]
    );
    let kv: Vec<bool> = PeerPolicy::ALL
        .iter()
        .map(|p| p.needs_kv_events())
        .collect();
    assert_eq!(kv, [false, false, false, false, false, true]);
}

#[test]
fn counts_since_a_reading() {
    let c = |requests, prefix_queries, prefix_hits, preemptions| EngineCounters {
        requests,
        prefix_queries,
        prefix_hits,
        preemptions,
    };
    assert_eq!(since(c(10, 500, 200, 1), c(1, 1, 0, 0)), c(9, 499, 200, 1));
    assert_eq!(since(c(0, 0, 0, 0), c(1, 1, 0, 0)), c(0, 0, 0, 0));
}
