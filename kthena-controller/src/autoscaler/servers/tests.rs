use kthena_api::{ModelServer, ModelServing};
use serde_json::json;

use super::*;

fn ms() -> ModelServing {
    serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelServing",
        "metadata": {"name": "llama", "namespace": "ns"},
        "spec": {"template": {"roles": [
            {"name": "prefill", "workerReplicas": 0, "entryTemplate": {"metadata": {"labels": {"app": "llama", "tier": "p"}}, "spec": {"containers": []}}},
            {"name": "decode", "workerReplicas": 0, "entryTemplate": {"metadata": {"labels": {"app": "llama"}}, "spec": {"containers": []}}},
        ]}},
    }))
    .unwrap()
}

fn server(name: &str, selector: &serde_json::Value) -> ModelServer {
    serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ModelServer",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"workloadSelector": selector, "workloadPort": {"port": 8000}, "inferenceEngine": "vLLM", "model": "m"},
    }))
    .unwrap()
}

#[test]
fn entry_labels_are_the_controllers_and_the_templates() {
    let labels = entry_labels(&ms());
    assert_eq!(labels.len(), 2);
    assert_eq!(labels[0]["modelserving.volcano.sh/name"], "llama");
    assert_eq!(labels[0]["modelserving.volcano.sh/role"], "prefill");
    assert_eq!(labels[0]["modelserving.volcano.sh/entry"], "true");
    assert_eq!(labels[0]["modelserving.volcano.sh/group-name"], "llama-0");
    assert_eq!(labels[0]["tier"], "p");
    assert_eq!(labels[1]["modelserving.volcano.sh/role"], "decode");
}

#[test]
fn model_servers_that_select_an_entry_pod_serve_the_target() {
    let servers = [
        server(
            "by-name",
            &json!({"matchLabels": {"modelserving.volcano.sh/name": "llama"}}),
        ),
        server(
            "by-template",
            &json!({"matchLabels": {"app": "llama", "tier": "p"}}),
        ),
        server("other", &json!({"matchLabels": {"app": "qwen"}})),
        server(
            "pd",
            &json!({"matchLabels": {"app": "llama"}, "pdGroup": {
            "groupKey": "modelserving.volcano.sh/group-name",
            "prefillLabels": {"modelserving.volcano.sh/role": "prefill"},
            "decodeLabels": {"modelserving.volcano.sh/role": "decode"}}}),
        ),
        server(
            "pd-no-key",
            &json!({"pdGroup": {
            "groupKey": "absent",
            "prefillLabels": {"modelserving.volcano.sh/role": "prefill"},
            "decodeLabels": {"modelserving.volcano.sh/role": "decode"}}}),
        ),
    ];
    assert_eq!(
        serving(&ms(), &servers),
        ["ns/by-name", "ns/by-template", "ns/pd"]
    );
}
