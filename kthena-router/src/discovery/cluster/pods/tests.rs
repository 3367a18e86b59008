use super::*;
use kthena_api::networking::InferenceEngine;

fn pod(name: &str, labels: &[(&str, &str)], ip: &str, ready: bool) -> Arc<Pod> {
    let v = serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<std::collections::BTreeMap<_, _>>(),
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    });
    Arc::new(serde_json::from_value(v).unwrap())
}

fn server(name: &str, ns: &str, app: &str, port: i32) -> ModelServer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "inferenceEngine": "vLLM",
            "workloadSelector": {"matchLabels": {"app": app}},
            "workloadPort": {"port": port},
        },
    }))
    .unwrap()
}

#[test]
fn ready_selected_pods_become_endpoints_at_the_first_servers_port() {
    let pods = vec![
        pod("b", &[("app", "m")], "127.0.0.3", true),
        pod("a", &[("app", "m"), ("x", "y")], "127.0.0.2", true),
        pod("not-ready", &[("app", "m")], "127.0.0.4", false),
        pod("unselected", &[("app", "other")], "127.0.0.5", true),
        pod("v6", &[("app", "m")], "::1", true),
    ];
    let servers = vec![
        server("z-second", "ns", "m", 9000),
        server("a-first", "ns", "m", 8001),
        server("elsewhere", "other-ns", "other", 7000),
    ];
    let eps = pod_endpoints(&pods, &servers).endpoints;
    let got: Vec<(&str, &str)> = eps
        .iter()
        .map(|e| (e.name.as_str(), e.address.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", "127.0.0.2:8001"),
            ("b", "127.0.0.3:8001"),
            ("v6", "[::1]:8001")
        ]
    );
    assert_eq!(eps[0].namespace, "ns");
    assert_eq!(eps[0].labels.get("x").map(String::as_str), Some("y"));
}

#[test]
fn deleting_pending_or_ipless_pods_are_not_ready() {
    let mut p = (*pod("a", &[], "127.0.0.2", true)).clone();
    assert!(pod_is_ready(&p));
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::UNIX_EPOCH,
    ));
    assert!(!pod_is_ready(&p));
    let mut p = (*pod("a", &[], "127.0.0.2", true)).clone();
    if let Some(st) = p.status.as_mut() {
        st.phase = Some("Pending".into());
    }
    assert!(!pod_is_ready(&p));
    let mut p = (*pod("a", &[], "", true)).clone();
    assert!(!pod_is_ready(&p));
    p.status = None;
    assert!(!pod_is_ready(&p));
}

#[test]
fn port_zero_falls_back_to_the_engine_default() {
    let pods = vec![pod("a", &[("app", "m")], "127.0.0.2", true)];
    let mut s = server("s", "ns", "m", 0);
    assert_eq!(
        pod_endpoints(&pods, &[s.clone()]).endpoints[0].address,
        "127.0.0.2:8000"
    );
    s.spec.inference_engine = InferenceEngine::SgLang;
    assert_eq!(
        pod_endpoints(&pods, &[s]).endpoints[0].address,
        "127.0.0.2:30000"
    );
}

/// A ready pod selected by `server("s", "ns", "m", 8000)` with `containers` and `extra`
/// merged into its JSON.
fn engine_pod(containers: &serde_json::Value, extra: serde_json::Value) -> Arc<Pod> {
    let mut v = serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "m"}},
        "spec": {"containers": containers.clone()},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "image": "i", "imageID": "",
                 "state": {"running": {"startedAt": "2026-01-02T03:04:05Z"}}},
                {"name": "b", "ready": true, "restartCount": 1, "image": "i", "imageID": "",
                 "state": {"running": {"startedAt": "2026-01-02T03:04:09Z"}}},
            ],
        },
    });
    json_merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).unwrap())
}

fn json_merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[test]
fn kthenas_vllm_example_pod_is_subscribed_at_its_ip() {
    // Go Kthena examples/model-serving/gpu-kvcache-aware.yaml: sh -c with a script.
    let script = "python3 -m vllm.entrypoints.openai.api_server \\\n--port \"8000\" \\\n--served-model-name Qwen/Qwen3-0.6B \\\n--kv-events-config '{\"enable_kv_cache_events\":true,\"topic\":\"kv-events\",\"replay_endpoint\":\"tcp://*:5558\"}'\n";
    let pod = engine_pod(
        &serde_json::json!([
            {"name": "sidecar", "image": "i", "args": ["--engine-base-url", "http://127.0.0.1:8000"]},
            {"name": "server", "image": "i", "command": ["sh", "-c"], "args": [script]},
        ]),
        serde_json::json!({}),
    );
    let got = pod_endpoints(&[pod], &[server("s", "ns", "m", 8000)]);
    assert!(got.kv_warnings.is_empty(), "{:?}", got.kv_warnings);
    let ep = &got.endpoints[0];
    assert_eq!(ep.kv_events.as_deref(), Some("tcp://10.0.0.9:5557"));
    assert_eq!(ep.kv_events_replay.as_deref(), Some("tcp://10.0.0.9:5558"));
    assert_eq!(ep.incarnation.as_deref(), Some("u-1/3"));
    // 2026-01-02T03:04:09Z, the newer of the two running containers.
    assert_eq!(ep.container_started, Some(1_767_323_049));
}

#[test]
fn the_annotation_is_the_fallback_and_args_win() {
    let annotated = serde_json::json!({"metadata": {"annotations": {
        "kthena.io/kv-events-endpoint": "6000",
        "kthena.io/kv-events-replay-endpoint": "6001",
    }}});
    let plain = engine_pod(
        &serde_json::json!([{"name": "e", "image": "i", "args": ["serve"]}]),
        annotated.clone(),
    );
    let ep = &pod_endpoints(&[plain], &[server("s", "ns", "m", 8000)]).endpoints[0];
    assert_eq!(ep.kv_events.as_deref(), Some("tcp://10.0.0.9:6000"));
    assert_eq!(ep.kv_events_replay.as_deref(), Some("tcp://10.0.0.9:6001"));
    let with_args = engine_pod(
        &serde_json::json!([{"name": "e", "image": "i", "args": [
            "--kv-events-config", r#"{"publisher":"zmq","endpoint":"tcp://*:7000"}"#]}]),
        annotated,
    );
    let ep = &pod_endpoints(&[with_args], &[server("s", "ns", "m", 8000)]).endpoints[0];
    assert_eq!(ep.kv_events.as_deref(), Some("tcp://10.0.0.9:7000"));
    assert_eq!(ep.kv_events_replay, None);
}

#[test]
fn an_unusable_publisher_is_a_warning_and_the_pod_still_serves() {
    let pod = engine_pod(
        &serde_json::json!([{"name": "e", "image": "i", "args": [
            "--kv-events-config", r#"{"enable_kv_cache_events":true,"endpoint":"tcp://relay:5557"}"#]}]),
        serde_json::json!({}),
    );
    let got = pod_endpoints(&[pod], &[server("s", "ns", "m", 8000)]);
    assert_eq!(got.endpoints.len(), 1);
    assert_eq!(got.endpoints[0].kv_events, None);
    assert_eq!(got.kv_warnings.len(), 1);
    assert_eq!(got.kv_warnings[0].0, "ns/p@u-1/3");
    assert!(
        got.kv_warnings[0].1.contains("tcp://*:PORT"),
        "{:?}",
        got.kv_warnings
    );
    let bad_json = engine_pod(
        &serde_json::json!([{"name": "e", "image": "i", "args": ["--kv-events-config", "{oops"]}]),
        serde_json::json!({}),
    );
    let got = pod_endpoints(&[bad_json], &[server("s", "ns", "m", 8000)]);
    assert_eq!(got.endpoints[0].kv_events, None);
    assert!(
        got.kv_warnings[0].1.contains("{oops"),
        "{:?}",
        got.kv_warnings
    );
}

#[test]
fn a_pod_without_kv_events_has_none() {
    let pod = engine_pod(
        &serde_json::json!([{"name": "e", "image": "i", "args": ["vllm", "serve", "m"]}]),
        serde_json::json!({}),
    );
    let got = pod_endpoints(&[pod], &[server("s", "ns", "m", 8000)]);
    assert!(got.kv_warnings.is_empty());
    assert_eq!(got.endpoints[0].kv_events, None);
    assert_eq!(got.endpoints[0].kv_events_replay, None);
}

#[test]
fn a_replay_socket_on_loopback_costs_only_the_replay() {
    let pod = engine_pod(
        &serde_json::json!([{"name": "e", "image": "i", "args": [
            "--kv-events-config", r#"{"enable_kv_cache_events":true,"replay_endpoint":"tcp://127.0.0.1:5558"}"#]}]),
        serde_json::json!({}),
    );
    let got = pod_endpoints(&[pod], &[server("s", "ns", "m", 8000)]);
    assert_eq!(
        got.endpoints[0].kv_events.as_deref(),
        Some("tcp://10.0.0.9:5557")
    );
    assert_eq!(got.endpoints[0].kv_events_replay, None);
    assert_eq!(got.kv_warnings.len(), 1);
    assert!(
        got.kv_warnings[0].1.contains("loopback"),
        "{:?}",
        got.kv_warnings
    );
}
