use super::*;

fn route() -> Value {
    json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {
            "name": "r", "namespace": "ns1", "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "x"}],
            "labels": {"b": "2", "a": "1"},
        },
        "spec": {
            "modelName": "qwen",
            "rules": [{"name": "default", "targetModels": [{"modelServerName": "s", "weight": 100}]}],
            "note": "line one\nline two\n",
        },
    })
}

#[test]
fn yaml_is_sorted_block_style_with_compact_lists() {
    let y = to_yaml(&without_managed_fields(route())).unwrap();
    assert_eq!(
        y,
        "apiVersion: networking.serving.volcano.sh/v1alpha1\n\
             kind: ModelRoute\n\
             metadata:\n  creationTimestamp: \"2026-01-01T00:00:00Z\"\n  labels:\n    a: \"1\"\n    b: \"2\"\n  name: r\n  namespace: ns1\n\
             spec:\n  modelName: qwen\n  note: |\n    line one\n    line two\n  rules:\n  - name: default\n    targetModels:\n    - modelServerName: s\n      weight: 100\n"
    );
}

#[test]
fn long_strings_stay_on_one_line() {
    let long = "word ".repeat(40);
    let y = to_yaml(&json!({"a": long.trim()})).unwrap();
    assert_eq!(y, format!("a: {}\n", long.trim()));
}

#[test]
fn describe_has_gos_header() {
    let now: Timestamp = "2026-01-01T00:01:05Z".parse().unwrap();
    let d = describe_text(Kind::ModelRoute, &without_managed_fields(route()), now).unwrap();
    let header = "ModelRoute: r\n================\nNamespace: ns1\nCreated: 2026-01-01T00:00:00Z\nAge: 1m5s\n\nResource Details:\n=================\napiVersion: networking.serving.volcano.sh/v1alpha1\n";
    assert!(d.starts_with(header), "{d}");
    let d = describe_text(Kind::ModelBooster, &route(), now).unwrap();
    assert!(d.starts_with("Model: r\n"));
}

#[test]
fn lists_and_json() {
    let l = list_object(vec![json!({"a": 1})]);
    assert_eq!(
        to_json(&l).unwrap(),
        "{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    {\n      \"a\": 1\n    }\n  ],\n  \"kind\": \"List\",\n  \"metadata\": {\n    \"resourceVersion\": \"\"\n  }\n}\n"
    );
}
