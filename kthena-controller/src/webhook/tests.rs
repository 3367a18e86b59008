//! The controller-manager's extra admission rule on top of `kthena_webhook::review`.

use serde_json::{Value, json};

use super::{Action, review};
use crate::testutil::TestResult;

fn request(operation: &str, object: &Value, _old: Option<&Value>) -> Vec<u8> {
    let req = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "workload.serving.volcano.sh", "version": "v1alpha1", "kind": "ModelBooster"},
            "resource": {"group": "workload.serving.volcano.sh", "version": "v1alpha1", "resource": "modelboosters"},
            "name": "x",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "dryRun": false,
        }
    });
    serde_json::to_vec(&req).unwrap_or_default()
}

fn answer(action: Action, body: &[u8]) -> Result<Value, serde_json::Error> {
    let out: Value = serde_json::from_slice(&review(action, body))?;
    Ok(out["response"].clone())
}

fn booster(name: &str, backend: &str) -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelBooster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"backend": {
            "name": backend, "type": "vLLM", "modelURI": "hf://Qwen/Qwen3-8B", "replicas": 1,
            "workers": [{"type": "server", "image": "vllm:1", "replicas": 1, "pods": 1}],
        }},
    })
}

/// Regression: a ModelBooster whose name and backend name make the generated pod names
/// longer than 63 characters was admitted, then went `Failed` when its ModelServing was
/// refused. It is refused at once, with the generated object's own message.
#[test]
fn a_booster_whose_model_serving_would_be_refused_is_refused() -> TestResult {
    let ok = answer(
        Action::Validate,
        &request("CREATE", &booster("qwen", "qwen-vllm"), None),
    )?;
    assert_eq!(ok["allowed"], true, "{ok}");
    let long = "c".repeat(40);
    let r = answer(
        Action::Validate,
        &request("CREATE", &booster(&long, "backend-name-is-long"), None),
    )?;
    assert_eq!(r["allowed"], false);
    let msg = r["status"]["message"].as_str().unwrap_or_default();
    let prefix = format!(
        "validation failed:\n  - spec: the ModelServing {long}-backend-name-is-long it generates is not valid: spec.template.roles[0].name: generated name \"{long}-backend-name-is-long-1-leader-1-0\" is not valid: must be no more than 63 characters"
    );
    assert!(msg.starts_with(&prefix), "{msg}");
    Ok(())
}

/// Without the controller's rule (the router's webhook) the same booster is admitted: the
/// rule is the controller's alone.
#[test]
fn the_shared_review_has_no_booster_rule() -> TestResult {
    let long = "c".repeat(40);
    let body = request("CREATE", &booster(&long, "backend-name-is-long"), None);
    let out: Value = serde_json::from_slice(&kthena_webhook::review(Action::Validate, &body))?;
    assert_eq!(out["response"]["allowed"], true, "{out}");
    Ok(())
}
