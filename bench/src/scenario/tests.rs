use super::*;

#[test]
fn every_policy_is_a_valid_scheduler_config() {
    for p in policies() {
        let yaml = format!("scheduler:\n{}", p.scheduler_yaml);
        let cfg: serde_json::Value = serde_json::to_value(
            kthena_router::Config::from_yaml(std::path::Path::new("r.yaml"), &yaml)
                .map(|c| c.scheduler)
                .unwrap(),
        )
        .unwrap();
        assert!(cfg["plugins"]["Score"]["enabled"].is_array(), "{}", p.name);
        kthena_router::sched::build_scheduler(
            &kthena_router::Config::from_yaml(std::path::Path::new("r.yaml"), &yaml)
                .unwrap()
                .scheduler,
        )
        .unwrap();
    }
    // The best combination is `SchedulerConfig::recommended()` (the deploy ConfigMap's).
    let best = policies().into_iter().find(|p| p.name == BEST).unwrap();
    let yaml = format!("scheduler:\n{}", best.scheduler_yaml);
    let cfg = kthena_router::Config::from_yaml(std::path::Path::new("r.yaml"), &yaml).unwrap();
    let mut want = kthena_router::config::SchedulerConfig::recommended();
    let mut got = cfg.scheduler;
    // The benchmark names the args of both cache plugins explicitly; the scores match.
    got.plugin_config.clear();
    want.plugin_config.clear();
    assert_eq!(got, want);
    assert_eq!(Scenario::long(true, 0).workload.prompts_per_group, 8);
    assert_eq!(Scenario::short(false, 0).workload.question_len, 4096);
}
