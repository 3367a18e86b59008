use super::*;

fn field_error(yaml: &str) -> (String, String) {
    match Config::from_yaml(yaml) {
        Err(e) if e.path().is_some() => (e.path().unwrap_or_default().to_owned(), e.to_string()),
        other => panic!("{yaml}: expected a field error, got {other:?}"),
    }
}

#[test]
fn unknown_keys_are_errors_naming_path_and_suggestion() {
    let cases = [
        (
            "plugins: {Score: {enabled: [{name: gpu-usage, wieght: 5}]}}",
            "unknown key `plugins.Score.enabled[0].wieght`: did you mean `weight`?",
        ),
        (
            "pluginconfig: [{name: least-request, args: {maxWaitingRequests: 3}}]\nplugins: {Score: {enabled: [{name: least-request}]}}",
            "unknown key `pluginconfig`: did you mean `pluginConfig`?",
        ),
        (
            "plugins: {filter: {enabled: [least-request]}, Score: {enabled: [{name: least-request}]}}",
            "unknown key `plugins.filter`: did you mean `Filter`?",
        ),
        (
            "plugins: {Score: {enabeld: [{name: gpu-usage}]}}",
            "unknown key `plugins.Score.enabeld`: did you mean `enabled`?",
        ),
        (
            "pluginConfig: [{name: least-request, arg: {maxWaitingRequests: 3}}]\nplugins: {Score: {enabled: [{name: least-request}]}}",
            "unknown key `pluginConfig[0].arg`: did you mean `args`?",
        ),
        (
            "plugins: {Score: {enabled: [{name: gpu-usage}]}, extra: 1}",
            "unknown key `plugins.extra`: expected one of `Filter`, `Score`",
        ),
    ];
    for (yaml, want) in cases {
        let (_, msg) = field_error(yaml);
        assert_eq!(msg, want, "{yaml}");
    }
    // Through a whole router file the path starts at `scheduler`.
    let e = Config::from_router_yaml(
            "auth: {issuer: x}\nscheduler:\n  plugins:\n    Score:\n      enabled:\n      - {name: gpu-usage, wieght: 5}\n",
        )
        .unwrap_err();
    assert_eq!(e.path(), Some("scheduler.plugins.Score.enabled[0].wieght"));
    // Plugin args: checked when the scheduler is built, under `pluginConfig[i].args`.
    let cfg = Config::from_yaml(
            "pluginConfig:\n- name: least-request\n- name: prefix-cache\n  args: {blockSizeToHas: 16}\nplugins: {Score: {enabled: [{name: prefix-cache}]}}",
        )
        .unwrap();
    let e = crate::Scheduler::from_config(&cfg).unwrap_err();
    assert_eq!(
        e.under("scheduler").to_string(),
        "unknown key `scheduler.pluginConfig[1].args.blockSizeToHas`: did you mean `blockSizeToHash`?"
    );
}

#[test]
fn duplicate_keys_name_no_parser_option() {
    let e = Config::from_yaml("plugins:\n  Score: {enabled: [{name: gpu-usage}]}\n  Score: {}\n")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid YAML: duplicate mapping key `Score` is not allowed here at line 3, column 3"
    );
}

#[test]
fn every_key_go_kthena_reads_is_accepted() {
    // Go's `conf.go`, including both `disabled` lists (strings for Filter, {name, weight} for
    // Score) and `args` left out.
    let cfg = Config::from_yaml(
            "pluginConfig:\n- name: least-request\n  args: {maxWaitingRequests: 10}\n- name: gpu-usage\nplugins:\n  Filter:\n    enabled: [least-request]\n    disabled: [lora-affinity]\n  Score:\n    enabled:\n    - {name: least-request, weight: 1}\n    disabled:\n    - {name: random, weight: 1}\n",
        )
        .unwrap();
    assert_eq!(
        cfg.plugins.filter.disabled,
        vec![serde_json::json!("lora-affinity")]
    );
    assert_eq!(cfg.plugins.score.disabled.len(), 1);
    assert_eq!(cfg.plugin_config[1].args, serde_json::Value::Null);
}

#[test]
fn example_router_files_load() {
    for (text, scores) in [
        (include_str!("../../../examples/standalone/router.yaml"), 4),
        (include_str!("../../../examples/kv-events/router.yaml"), 3),
    ] {
        let cfg = Config::from_router_yaml(text).unwrap().validate().unwrap();
        assert_eq!(cfg.plugins.score.enabled.len(), scores);
    }
}

#[test]
fn weight_must_be_a_number() {
    let (path, msg) =
        field_error("plugins: {Score: {enabled: [{name: gpu-usage, weight: \"2\"}]}}");
    assert_eq!(path, "plugins.Score.enabled[0].weight");
    assert_eq!(
        msg,
        "`plugins.Score.enabled[0].weight`: invalid type: string \"2\", expected a number"
    );
    let (path, _) = field_error("plugins: {Score: {enabled: [{name: gpu-usage, weight: true}]}}");
    assert_eq!(path, "plugins.Score.enabled[0].weight");
    let cfg = Config::from_yaml("plugins: {Score: {enabled: [{name: gpu-usage, weight: 3}, {name: least-request, weight: 0.5}]}}").unwrap();
    assert_eq!(cfg.plugins.score.enabled[0].weight, 3.0);
    assert_eq!(cfg.plugins.score.enabled[1].weight, 0.5);
}

#[test]
fn weight_is_bounded() {
    let with = |w: &str| {
        Config::from_yaml(&format!(
            "plugins: {{Score: {{enabled: [{{name: gpu-usage, weight: {w}}}]}}}}"
        ))
        .unwrap()
        .validate()
    };
    assert_eq!(
        with("1000000").unwrap().plugins.score.enabled[0].weight,
        1e6
    );
    for (w, shown) in [("1e7", "10000000"), ("1000001", "1000001"), ("-1", "-1")] {
        assert_eq!(
            with(w).unwrap_err().to_string(),
            format!(
                "invalid weight {shown} for score plugin \"gpu-usage\": must be a number in [0, 1000000]"
            ),
        );
    }
    assert!(matches!(with("1e308"), Err(Error::InvalidWeight { weight, .. }) if weight == 1e308));
    let mut cfg = Config::default();
    cfg.plugins.score.enabled[0].weight = f64::INFINITY;
    assert!(
        matches!(cfg.validate(), Err(Error::InvalidWeight { weight, .. }) if weight == f64::INFINITY)
    );
}

#[test]
fn whole_router_file_is_not_a_section() {
    let want = "expected the scheduler section alone, but the text has a top-level `scheduler` key: \
                    pass the value under `scheduler:`, or read the whole router file with Config::from_router_yaml";
    for yaml in [
        "scheduler:\n  plugins: {Score: {enabled: [{name: gpu-usage}]}}\nauth: {issuer: x}\n",
        "scheduler: 3",
        "scheduler:",
    ] {
        let e = Config::from_yaml(yaml).unwrap_err();
        assert!(matches!(e, Error::RouterFile), "{yaml}: {e:?}");
        assert_eq!(e.to_string(), want);
    }
    let e = Config::from_yaml("3").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the scheduler section must be a mapping (keys `pluginConfig`, `plugins`), found an integer"
    );
    let e = Config::from_yaml("[a, b]").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the scheduler section must be a mapping (keys `pluginConfig`, `plugins`), found a sequence"
    );
    // A whole file whose `scheduler:` is not a mapping names the key.
    let e = Config::from_router_yaml("scheduler: 3").unwrap_err();
    assert_eq!(e.path(), Some("scheduler"));
    // Malformed YAML stays a YAML error.
    assert!(matches!(
        Config::from_yaml("plugins: [1"),
        Err(Error::Yaml(_))
    ));
}
