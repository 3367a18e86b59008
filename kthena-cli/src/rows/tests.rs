use super::*;
use serde_json::json;

fn now() -> Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

fn serving(name: &str, status: &serde_json::Value) -> ModelServing {
    serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name, "namespace": "prod", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"template": {"roles": []}},
        "status": status,
    }))
    .unwrap()
}

fn cond(type_: &str, status: &str) -> serde_json::Value {
    json!({"type": type_, "status": status, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

#[test]
fn model_serving_status_priority() {
    let cases = [
        (vec![], "Unknown"),
        (vec![cond("Available", "False")], "Unknown"),
        (vec![cond("Progressing", "True")], "Progressing"),
        (
            vec![
                cond("Progressing", "True"),
                cond("UpdateInProgress", "True"),
            ],
            "Updating",
        ),
        (
            vec![
                cond("Progressing", "True"),
                cond("UpdateInProgress", "True"),
                cond("Available", "True"),
            ],
            "Available",
        ),
    ];
    for (conditions, want) in cases {
        let ms = serving("a", &json!({"replicas": 2, "conditions": conditions}));
        assert_eq!(model_serving_status(&ms), want);
    }
}

#[test]
fn model_serving_ready_is_available_over_replicas() {
    let ms = serving("a", &json!({"replicas": 3, "availableReplicas": 2}));
    assert_eq!(model_serving_ready(&ms), "2/3");
    let ms = serving("a", &json!({"replicas": 3}));
    assert_eq!(model_serving_ready(&ms), "0/3");
    let mut ms = serving("a", &json!({}));
    ms.status = None;
    assert_eq!(model_serving_ready(&ms), "0/0");
}

#[test]
fn model_booster_status_priority() {
    let booster = |conditions: Vec<serde_json::Value>| -> ModelBooster {
        serde_json::from_value(json!({
            "apiVersion": "workload.serving.volcano.sh/v1alpha1",
            "kind": "ModelBooster",
            "metadata": {"name": "m"},
            "spec": {"backend": {"name": "b", "type": "vLLM", "modelURI": "hf://a/b", "replicas": 1, "workers": []}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    };
    assert_eq!(model_booster_status(&booster(vec![])), "Unknown");
    assert_eq!(
        model_booster_status(&booster(vec![cond("Initialized", "True")])),
        "Initialized"
    );
    assert_eq!(
        model_booster_status(&booster(vec![
            cond("Initialized", "True"),
            cond("Active", "True")
        ])),
        "Active"
    );
    assert_eq!(
        model_booster_status(&booster(vec![
            cond("Active", "True"),
            cond("Failed", "True")
        ])),
        "Failed"
    );
    assert_eq!(
        model_booster_status(&booster(vec![cond("Active", "Unknown")])),
        "Unknown"
    );
}

fn route(model: &str, loras: &[&str], rules: usize) -> ModelRoute {
    let rules: Vec<_> = (0..rules)
        .map(|_| json!({"targetModels": [{"modelServerName": "s"}]}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "r", "namespace": "ns1", "creationTimestamp": "2025-12-31T23:58:57Z"},
        "spec": {"modelName": model, "loraAdapters": loras, "rules": rules},
    }))
    .unwrap()
}

#[test]
fn model_route_model_column() {
    assert_eq!(model_route_model(&route("qwen", &["a"], 1)), "qwen");
    assert_eq!(model_route_model(&route("", &["a", "b"], 1)), "a,b");
    assert_eq!(model_route_model(&route("", &[], 1)), "<lora>");
}

#[test]
fn tables_with_and_without_namespace_column() {
    let routes = vec![route("qwen", &[], 2), route("", &["lora-a"], 1)];
    let t = list_table(&routes, &Scope::Namespace("ns1".into()), now()).unwrap();
    assert_eq!(
        t,
        "NAME   MODEL    RULES   AGE\nr      qwen     2       1h1m3s\nr      lora-a   1       1h1m3s\n"
    );
    let t = list_table(&routes, &Scope::All, now()).unwrap();
    assert_eq!(
        t,
        "NAMESPACE   NAME   MODEL    RULES   AGE\nns1         r      qwen     2       1h1m3s\nns1         r      lora-a   1       1h1m3s\n"
    );
    assert_eq!(list_table::<ModelRoute>(&[], &Scope::All, now()), None);
}

#[test]
fn serving_table() {
    let ms = vec![serving(
        "llama",
        &json!({"replicas": 2, "availableReplicas": 1, "conditions": [cond("Progressing", "True")]}),
    )];
    let t = list_table(&ms, &Scope::Namespace("prod".into()), now()).unwrap();
    assert_eq!(
        t,
        "NAME    READY   STATUS        AGE\nllama   1/2     Progressing   1h0m0s\n"
    );
}

#[test]
fn empty_messages_are_gos() {
    let ns = Scope::Namespace("prod".into());
    assert_eq!(
        empty_message(Kind::ModelServing, &ns, None),
        "No ModelServings found in namespace prod."
    );
    assert_eq!(
        empty_message(Kind::ModelRoute, &Scope::All, None),
        "No ModelRoutes found across all namespaces."
    );
    assert_eq!(
        empty_message(Kind::ModelBooster, &ns, Some("Qwen")),
        "No Models found matching 'Qwen'."
    );
    assert_eq!(
        empty_message(Kind::AutoscalingPolicy, &ns, None),
        "No AutoscalingPolicies found in namespace prod."
    );
    assert_eq!(
        empty_message(Kind::ModelServer, &Scope::All, None),
        "No ModelServers found across all namespaces."
    );
}

#[test]
fn name_filter_is_case_insensitive_substring() {
    assert!(matches_filter("Qwen3-8B", Some("qwen")));
    assert!(matches_filter("qwen3-8b", Some("3-8B")));
    assert!(!matches_filter("llama", Some("qwen")));
    assert!(matches_filter("llama", None));
}
