use serde_json::json;

use super::*;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

#[test]
fn vllm_container_gives_model_and_port() {
    let p = pod(json!({"spec": {"containers": [
        {"name": "sidecar", "image": "envoy"},
        {"name": "engine", "image": "vllm/vllm-openai",
         "args": ["--model", "Qwen/Qwen3-8B", "--served-model-name=qwen3", "--port", "9000"],
         "ports": [{"containerPort": 8100}]}
    ]}}));
    let c = engine_config(&p, &Config::default().with_time_scale(10.0)).unwrap();
    assert_eq!(
        (c.model.as_str(), c.port, c.time_scale),
        ("qwen3", 8100, 10.0)
    );
    assert_eq!(c.flavor, Flavor::Vllm);
}

#[test]
fn serve_positional_env_and_sglang() {
    let p = pod(json!({"spec": {"containers": [{"name": "e",
            "command": ["vllm", "serve", "deepseek-ai/DeepSeek-R1"], "args": ["--port", "8001"]}]}}));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!(
        (c.model.as_str(), c.port),
        ("deepseek-ai/DeepSeek-R1", 8001)
    );

    let p = pod(json!({"spec": {"containers": [{"name": "e",
            "env": [{"name": "MODEL", "value": "m2"}, {"name": "MODEL_NAME", "value": "m1"}]}]}}));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!((c.model.as_str(), c.port), ("m1", DEFAULT_PORT));

    let p = pod(json!({"spec": {"containers": [{"name": "e",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--model-path", "Qwen/Qwen2.5-7B"], "ports": [{"containerPort": 30000}]}]}}));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!(
        (c.model.as_str(), c.port, c.flavor),
        ("Qwen/Qwen2.5-7B", 30000, Flavor::Sglang)
    );
}

#[test]
fn kthena_sim_flags_from_annotation_or_command() {
    let p = pod(json!({
            "metadata": {"annotations": {ARGS_ANNOTATION: "--model m --role prefill --time-scale 5"}},
            "spec": {"containers": [{"name": "e", "args": ["--model", "ignored"],
                "ports": [{"containerPort": 8200}]}]}}));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!((c.model.as_str(), c.port, c.time_scale), ("m", 8200, 5.0));
    assert_eq!(c.role, crate::Role::Prefill);

    let p = pod(json!({"spec": {"containers": [{"name": "e",
            "command": ["/usr/bin/kthena-sim", "--model", "s", "--port", "7000"]}]}}));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!((c.model.as_str(), c.port), ("s", 7000));

    let p = pod(
        json!({"metadata": {"annotations": {ARGS_ANNOTATION: "--no-such-flag"}},
            "spec": {"containers": [{"name": "e"}]}}),
    );
    let err = engine_config(&p, &Config::default()).unwrap_err();
    assert!(err.contains("--no-such-flag"), "{err}");
}

#[test]
fn args_annotation_replaces_the_node_defaults_not_the_pod_args() {
    let node = Config {
        seed: 7,
        ..Config::default().with_time_scale(10.0)
    };
    let p = pod(json!({
            "metadata": {"annotations": {ARGS_ANNOTATION: "--max-num-seqs 1 --time-scale 1"}},
            "spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai",
                "args": ["--model", "asm", "--port", "8000"]}]}}));
    let c = engine_config(&p, &node).unwrap();
    assert_eq!((c.model.as_str(), c.port), ("asm", 8000));
    assert_eq!((c.profile.max_num_seqs, c.time_scale, c.seed), (1, 1.0, 0));

    // The pod's SGLang flavor and containerPort stay; flags the annotation writes win.
    let p = pod(json!({
            "metadata": {"annotations": {ARGS_ANNOTATION: "--role decode"}},
            "spec": {"containers": [{"name": "e",
                "command": ["python3", "-m", "sglang.launch_server"],
                "args": ["--model-path", "Qwen/Qwen2.5-7B", "--port=30001"],
                "ports": [{"containerPort": 30000}]}]}}));
    let c = engine_config(&p, &node).unwrap();
    assert_eq!(
        (c.model.as_str(), c.port, c.flavor, c.role),
        (
            "Qwen/Qwen2.5-7B",
            30000,
            Flavor::Sglang,
            crate::Role::Decode
        )
    );
    let p = pod(json!({
            "metadata": {"annotations": {ARGS_ANNOTATION: "--port 9100 --flavor vllm --model x"}},
            "spec": {"containers": [{"name": "e", "command": ["sglang"],
                "args": ["--served-model-name", "s"], "ports": [{"containerPort": 30000}]}]}}));
    let c = engine_config(&p, &node).unwrap();
    assert_eq!(
        (c.model.as_str(), c.port, c.flavor),
        ("x", 9100, Flavor::Vllm)
    );

    // A kthena-sim container: its flags, then the annotation's on top.
    let p = pod(json!({
            "metadata": {"annotations": {ARGS_ANNOTATION:
                "--time-scale 5 --role prefill --lora-modules c"}},
            "spec": {"containers": [{"name": "e", "command": ["kthena-sim"],
                "args": ["--model", "s", "--time-scale", "3", "--seed", "4", "--port", "7000",
                    "--lora-modules", "a,b"]}]}}));
    let c = engine_config(&p, &node).unwrap();
    assert_eq!(
        (c.model.as_str(), c.port, c.time_scale, c.seed),
        ("s", 7000, 5.0, 4)
    );
    assert_eq!(c.lora_modules, ["c"]);
    assert_eq!(c.role, crate::Role::Prefill);
}

/// A vLLM ModelBooster's pod (Go's `vllm.yaml`): the runtime sidecar first, with the only
/// `containerPort`, then the engine on the ModelServer's port, 8000.
fn booster_pod(engine_port: Option<u16>) -> Pod {
    let mut engine = json!({"name": "engine", "image": "vllm/vllm-openai",
            "command": ["python3", "-m", "vllm.entrypoints.openai.api_server",
                "--model", "/tmp/cache/0f1e", "--served-model-name", "Qwen2.5-0.5B-Instruct"],
            "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}});
    if let Some(port) = engine_port {
        engine["ports"] = json!([{"containerPort": port}]);
    }
    pod(json!({"spec": {"containers": [
        {"name": "runtime", "image": "kthena/runtime:latest",
         "ports": [{"containerPort": 8100}],
         "args": ["--port", "8100", "--engine", "vllm",
            "--engine-base-url", "http://localhost:8000", "--engine-metrics-path", "/metrics",
            "--pod", "$(POD_NAME).$(NAMESPACE)", "--model", "demo"]},
        engine,
    ]}}))
}

#[test]
fn engine_container_skips_the_runtime_sidecar() {
    for engine_port in [None, Some(8000)] {
        let c = engine_config(&booster_pod(engine_port), &Config::default()).unwrap();
        assert_eq!(
            (c.model.as_str(), c.port),
            ("Qwen2.5-0.5B-Instruct", 8000),
            "engine containerPort {engine_port:?}"
        );
    }
    // A proxy that declares a port comes before an engine that declares none.
    let p = pod(json!({"spec": {"containers": [
        {"name": "proxy", "image": "envoy", "ports": [{"containerPort": 15001}]},
        {"name": "engine", "image": "my-engine", "args": ["--model=m"]}
    ]}}));
    assert_eq!(
        engine_container(&p).map(|c| c.name.as_str()),
        Some("engine")
    );
    // Without an engine-like container: the first with a port, else the first.
    let p = pod(json!({"spec": {"containers": [
        {"name": "a", "image": "x"}, {"name": "b", "image": "y", "ports": [{"containerPort": 9}]}
    ]}}));
    assert_eq!(engine_container(&p).map(|c| c.name.as_str()), Some("b"));
    // A pod of runtime sidecars only runs its first.
    let mut p = booster_pod(None);
    if let Some(spec) = p.spec.as_mut() {
        spec.containers.truncate(1);
    }
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!((c.model.as_str(), c.port), ("demo", 8100));
}

#[test]
fn annotations() {
    let p = pod(
        json!({"metadata": {"annotations": {READY_ANNOTATION: "false", EXIT_ANNOTATION: "3"}}}),
    );
    assert!(!ready_wanted(&p));
    assert_eq!(exit_requested(&p), Some(3));
    let p = pod(json!({"metadata": {"annotations": {READY_ANNOTATION: "true"}}}));
    assert!(ready_wanted(&p));
    assert_eq!(exit_requested(&p), None);
}

#[test]
fn statuses() {
    let p = pod(json!({"spec": {"containers": [{"name": "e", "image": "vllm"}]}}));
    let t = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let ip: IpAddr = "127.0.0.2".parse().unwrap();
    let s = serde_json::to_value(running_status(&p, ip, false, &t, &t)).unwrap();
    assert_eq!(s["phase"], "Running");
    assert_eq!(s["podIP"], "127.0.0.2");
    assert_eq!(s["podIPs"], json!([{"ip": "127.0.0.2"}]));
    assert_eq!(s["conditions"][3]["type"], "Ready");
    assert_eq!(s["conditions"][3]["status"], "False");
    assert_eq!(s["containerStatuses"][0]["ready"], false);
    assert_eq!(s["containerStatuses"][0]["started"], true);
    let s = serde_json::to_value(terminated_status(&p, Some(ip), 137, "killed", &t, &t)).unwrap();
    assert_eq!(s["phase"], "Failed");
    assert_eq!(
        s["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    assert_eq!(
        s["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Error"
    );
}

/// The entry pod of the first role of a ModelServing in Kthena's examples
/// (`examples/model-serving/NAME` of the chart repository).
fn example_pod(name: &str) -> Pod {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kthena-manifests/examples/model-serving")
        .join(name);
    let docs = kthena_api::load_file(&path).unwrap();
    let Some(kthena_api::Object::ModelServing(ms)) = docs.into_iter().next().map(|d| d.object)
    else {
        panic!("{name} is not a ModelServing");
    };
    let template = ms.spec.template.roles[0].entry_template.clone();
    Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        status: None,
    }
}

#[test]
fn kthena_vllm_kvcache_example_publishes_kv_events() {
    // `sh -c` with `--kv-events-config '{"enable_kv_cache_events":true,"topic":"kv-events"}'`:
    // vLLM's default endpoint tcp://*:5557, no replay endpoint.
    let c = engine_config(&example_pod("gpu-kvcache-aware.yaml"), &Config::default()).unwrap();
    assert_eq!((c.model.as_str(), c.port), ("Qwen/Qwen3-0.6B", 8000));
    assert_eq!(c.flavor, Flavor::Vllm);
    assert_eq!(c.kv_events_port, Some(5557));
    assert_eq!(c.kv_events_topic.as_deref(), Some("kv-events"));
    assert_eq!(c.kv_events_replay_port, None);
    assert_eq!(c.kv_events_format, KvEventsFormat::Map);
}

#[test]
fn kthena_sglang_kvcache_example_publishes_kv_events_as_arrays() {
    let c = engine_config(
        &example_pod("gpu-kvcache-aware-sglang.yaml"),
        &Config::default(),
    )
    .unwrap();
    assert_eq!((c.model.as_str(), c.port), ("Qwen/Qwen3-0.6B", 30000));
    assert_eq!(c.flavor, Flavor::Sglang);
    assert_eq!(c.kv_events_port, Some(5557));
    assert_eq!(c.kv_events_topic.as_deref(), Some(""));
    assert_eq!(c.kv_events_format, KvEventsFormat::Array);
}

#[test]
fn kv_events_config_replay_port_and_the_annotation_wins() {
    let cfg = r#"{"enable_kv_cache_events":true,"endpoint":"tcp://*:6001","replay_endpoint":"tcp://*:6002","topic":"t"}"#;
    let p = pod(
        json!({"spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai",
        "args": ["--model", "m", "--kv-events-config", cfg]}]}}),
    );
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!(
        (c.kv_events_port, c.kv_events_replay_port),
        (Some(6001), Some(6002))
    );
    assert_eq!(c.kv_events_topic.as_deref(), Some("t"));

    let p = pod(json!({
        "metadata": {"annotations": {ARGS_ANNOTATION: "--kv-events-port 7001 --kv-events-topic a"}},
        "spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai",
            "args": ["--model", "m", "--kv-events-config", cfg]}]}}));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!(
        (c.kv_events_port, c.kv_events_replay_port),
        (Some(7001), Some(6002))
    );
    assert_eq!(c.kv_events_topic.as_deref(), Some("a"));
}

#[test]
fn kv_events_config_without_a_bound_publisher_publishes_nothing() {
    for cfg in [
        r#"{"enable_kv_cache_events":false}"#,
        r#"{"publisher":"null"}"#,
        r#"{"enable_kv_cache_events":true,"endpoint":"tcp://collector:5557"}"#,
        r#"{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/kv"}"#,
    ] {
        let p = pod(
            json!({"spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai",
            "args": ["--model", "m", format!("--kv-events-config={cfg}")]}]}}),
        );
        let c = engine_config(&p, &Config::default()).unwrap();
        assert_eq!(
            (c.kv_events_port, c.kv_events_replay_port),
            (None, None),
            "{cfg}"
        );
    }
    let p = pod(
        json!({"spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai",
        "args": ["--model", "m", "--kv-events-config", "{not json"]}]}}),
    );
    let err = engine_config(&p, &Config::default()).unwrap_err();
    assert!(err.starts_with("--kv-events-config: "), "{err}");
}

#[test]
fn the_routers_kv_event_annotations_make_the_engine_publish() {
    let p = pod(json!({
        "metadata": {"annotations": {
            "kthena.io/kv-events-endpoint": "6000",
            "kthena.io/kv-events-replay-endpoint": "tcp://*:6001",
        }},
        "spec": {"containers": [{"name": "e", "image": "vllm/vllm-openai",
            "args": ["--model", "m", "--port", "8000"]}]},
    }));
    let c = engine_config(&p, &Config::default()).unwrap();
    assert_eq!(
        (c.kv_events_port, c.kv_events_replay_port),
        (Some(6000), Some(6001))
    );
}
