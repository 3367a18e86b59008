use super::*;

#[test]
fn wide_scales_the_long_load_per_engine() {
    let w8 = wide(8, true, 1);
    assert_eq!(w8.scenario.name, "wide8");
    assert_eq!(w8.scenario.workload.num_groups, 683);
    assert_eq!(w8.scenario.workload.prompts_per_group, 8);
    assert_eq!(w8.scenario.max_concurrency, 800);
    assert!((w8.scenario.request_rate - 6400.0 / 3.0).abs() < 1e-9);
    assert_eq!(w8.pool, Pool::uniform(8));
    let w16 = wide(16, false, 1);
    assert_eq!(w16.scenario.workload.num_groups, 1365);
    assert_eq!(w16.scenario.workload.prompts_per_group, 32);
    assert_eq!(w16.scenario.max_concurrency, 1600);
    assert_eq!(w16.directs[0].count, 16);
    assert_eq!(w16.directs[0].share, 16);
}

#[test]
fn hetero_has_two_fast_and_two_slow_engines() {
    let h = hetero(true, 1, 28_000);
    let blocks: Vec<usize> = h
        .pool
        .engines
        .iter()
        .map(|e| e.profile.as_ref().map_or(0, |p| p.num_gpu_blocks))
        .collect();
    assert_eq!(blocks, [28_000, 28_000, 14_000, 14_000]);
    let slow = h.pool.engines[2].profile.clone().unwrap_or_default();
    assert!((slow.prefill_per_token_ms - 0.084).abs() < 1e-12);
    assert_eq!(slow.max_num_batched_tokens, 2048);
    assert_eq!(h.scenario.workload.num_groups, 256);
    assert_eq!(h.scenario.max_concurrency, 300);
    assert_eq!(
        ceiling(&h.directs, &[Some(30.0), Some(10.0)]),
        Some(2.0 * 30.0 + 2.0 * 10.0)
    );
    assert_eq!(ceiling(&h.directs, &[Some(30.0), None]), None);
}

#[test]
fn pd_pool_labels_and_model_server() {
    let p = pd(true, 1);
    assert_eq!(p.scenario.workload.num_groups, 341);
    assert_eq!(p.scenario.max_concurrency, 400);
    assert_eq!(p.pool.endpoint_labels(0), ", group: g0, role: prefill");
    assert_eq!(p.pool.endpoint_labels(3), ", group: g0, role: decode");
    assert_eq!(
        p.pool.model_server_extra().1,
        "  kvConnector: {type: nixl}\n"
    );
    let agg = p.aggregated.unwrap_or_else(|| Pool::uniform(0));
    assert_eq!(agg.endpoint_labels(0), "");
    assert_eq!(agg.model_server_extra(), ("", ""));
    let cfg = p.pool.engine_config(2, &kthena_sim::Config::default());
    assert_eq!(cfg.role, Role::Decode);
}
