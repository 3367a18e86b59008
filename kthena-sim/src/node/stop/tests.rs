use serde_json::json;

use super::*;

fn pod_with(lifecycle: &serde_json::Value, grace: Option<i64>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"deletionGracePeriodSeconds": grace},
        "spec": {"terminationGracePeriodSeconds": 45, "containers": [{
            "name": "engine", "image": "vllm/vllm-openai", "args": ["--model", "m"],
            "ports": [{"name": "http", "containerPort": 8000}],
            "lifecycle": {"preStop": lifecycle}}]}
    }))
    .unwrap()
}

#[test]
fn grace_period_prefers_the_deletion_value() {
    let p = pod_with(&json!({}), Some(7));
    assert_eq!(grace_period(&p), Duration::from_secs(7));
    let p = pod_with(&json!({}), None);
    assert_eq!(grace_period(&p), Duration::from_secs(45));
    let p: Pod = serde_json::from_value(json!({"spec": {"containers": []}})).unwrap();
    assert_eq!(grace_period(&p), DEFAULT_GRACE);
}

#[test]
fn hooks_are_read_from_the_engine_container() {
    let p = pod_with(
        &json!({"httpGet": {"path": "/drain", "port": "http"}}),
        None,
    );
    assert_eq!(
        pre_stop(&p),
        Some(Hook::HttpGet {
            path: "/drain".into(),
            port: Some(8000),
            host: None
        })
    );
    let p = pod_with(&json!({"sleep": {"seconds": 3}}), None);
    assert_eq!(pre_stop(&p), Some(Hook::Sleep(Duration::from_secs(3))));
    let p = pod_with(&json!({"exec": {"command": ["sleep", "2.5"]}}), None);
    assert_eq!(pre_stop(&p), Some(Hook::Sleep(Duration::from_millis(2500))));
    let p = pod_with(
        &json!({"exec": {"command": ["/bin/sh", "-c", "echo bye; sleep 10"]}}),
        None,
    );
    assert_eq!(pre_stop(&p), Some(Hook::Sleep(Duration::from_secs(10))));
    let drain = "while true; do RUNNING=$(curl -s http://localhost:8000/metrics | grep 'vllm:num_requests_running'); done";
    let p = pod_with(
        &json!({"exec": {"command": ["/bin/sh", "-c", drain]}}),
        None,
    );
    assert_eq!(pre_stop(&p), Some(Hook::Drain));
    let p = pod_with(&json!({"exec": {"command": ["/bin/true"]}}), None);
    assert_eq!(pre_stop(&p), Some(Hook::Unsupported("/bin/true".into())));
    let p = pod_with(&serde_json::Value::Null, None);
    assert_eq!(pre_stop(&p), None);
}
