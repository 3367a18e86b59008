//! Unit tests of the admission review handler: review in, review out.

use serde_json::{Value, json};

use super::{Action, action_for, review};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn request(operation: &str, object: &Value, old: Option<&Value>) -> Vec<u8> {
    let mut req = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "workload.serving.volcano.sh", "version": "v1alpha1", "kind": "ModelServing"},
            "resource": {"group": "workload.serving.volcano.sh", "version": "v1alpha1", "resource": "modelservings"},
            "name": "x",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": object,
            "dryRun": false,
        }
    });
    if let Some(old) = old {
        req["request"]["oldObject"] = old.clone();
    }
    serde_json::to_vec(&req).unwrap_or_default()
}

fn answer(action: Action, body: &[u8]) -> Result<Value, serde_json::Error> {
    let out: Value = serde_json::from_slice(&review(action, body))?;
    Ok(out["response"].clone())
}

fn serving(replicas: i64, role: &str) -> Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "template": {"roles": [{
                "name": role,
                "replicas": 1,
                "workerReplicas": 0,
                "entryTemplate": {"spec": {"containers": [{"name": "c", "image": "vllm"}]}},
            }]},
        },
    })
}

#[test]
fn paths_are_gos() {
    assert_eq!(
        action_for("/validate-workload-ai-v1alpha1-modelserving"),
        Some(Action::Validate)
    );
    assert_eq!(
        action_for("/mutate/autoscalingpolicy"),
        Some(Action::Mutate)
    );
    assert_eq!(action_for("/validate/nothing"), None);
}

#[test]
fn valid_model_serving_is_allowed_with_the_request_uid() -> TestResult {
    let r = answer(
        Action::Validate,
        &request("CREATE", &serving(1, "prefill"), None),
    )?;
    assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(r["allowed"], true);
    assert_eq!(r.get("patch"), None);
    Ok(())
}

#[test]
fn invalid_model_serving_lists_every_error() -> TestResult {
    let r = answer(
        Action::Validate,
        &request("CREATE", &serving(-1, "Bad_Role"), None),
    )?;
    assert_eq!(r["allowed"], false);
    let msg = r["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with(
            "validation failed:\n  - spec.replicas: replicas must be a non-negative integer"
        ),
        "{msg}"
    );
    assert!(msg.contains("\n  - spec.template.roles[0].name: "), "{msg}");
    Ok(())
}

#[test]
fn update_checks_transition_rules() -> TestResult {
    let mut old = serving(1, "prefill");
    old["spec"]["template"]["gangPolicy"] = json!({"minRoleReplicas": {"prefill": 1}});
    let r = answer(
        Action::Validate,
        &request("UPDATE", &serving(1, "prefill"), Some(&old)),
    )?;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "validation failed:\n  - spec.template: gangPolicy is required once set"
    );
    Ok(())
}

#[test]
fn model_server_joins_errors_on_one_line() -> TestResult {
    let server = json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": "s"},
        "spec": {"model": "m", "inferenceEngine": "vLLM",
                 "workloadSelector": {"matchLabels": {"app": "a"}},
                 "workloadPort": {"port": 0}},
    });
    let r = answer(Action::Validate, &request("CREATE", &server, None))?;
    assert_eq!(
        r["status"]["message"],
        "validation failed: spec.workloadPort.port: must be between 1 and 65535"
    );
    Ok(())
}

#[test]
fn autoscaling_policy_without_behavior_gets_gos_patch() -> TestResult {
    let policy = json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p"},
        "spec": {"tolerancePercent": 10, "homogeneousTarget": {
            "target": {"targetRef": {"name": "ms"}},
            "minReplicas": 1, "maxReplicas": 3,
        }, "metrics": [{"name": "m", "targetValue": "1"}]},
    });
    let r = answer(Action::Mutate, &request("CREATE", &policy, None))?;
    assert_eq!(r["allowed"], true);
    assert_eq!(r["patchType"], "JSONPatch");
    let patch: Value =
        serde_json::from_slice(&base64_decode(r["patch"].as_str().unwrap_or_default()))?;
    let behavior = patch
        .as_array()
        .and_then(|ops| ops.iter().find(|op| op["path"] == "/spec/behavior"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(behavior["op"], "add");
    assert_eq!(
        behavior["value"]["scaleDown"],
        json!({"instances": 0, "percent": 100, "period": "1m", "selectPolicy": "Or", "stabilizationWindow": "5m"})
    );
    assert_eq!(
        behavior["value"]["scaleUp"]["panicPolicy"],
        json!({"percent": 0, "period": "0s", "panicThresholdPercent": 200, "panicModeHold": "0s"})
    );
    Ok(())
}

#[test]
fn model_serving_gets_its_defaults_as_add_operations() -> TestResult {
    let r = answer(
        Action::Mutate,
        &request("CREATE", &serving(1, "prefill"), None),
    )?;
    assert_eq!(r["allowed"], true);
    let patch: Value =
        serde_json::from_slice(&base64_decode(r["patch"].as_str().unwrap_or_default()))?;
    let ops = patch.as_array().cloned().unwrap_or_default();
    assert!(ops.iter().all(|op| op["op"] == "add"), "{patch}");
    assert!(
        ops.contains(&json!({"op": "add", "path": "/spec/schedulerName", "value": "volcano"})),
        "{patch}"
    );
    Ok(())
}

#[test]
fn malformed_input_is_refused_without_panicking() -> TestResult {
    for body in [
        &b""[..],
        b"not json",
        b"{}",
        b"[1,2]",
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        br#"{"request":{"uid":1}}"#,
    ] {
        let r = answer(Action::Validate, body)?;
        assert_eq!(r["allowed"], false, "{}", String::from_utf8_lossy(body));
        assert_eq!(r["status"]["reason"], "InvalidRequest");
    }
    // An object that does not decode as its kind is denied with the field path.
    let mut bad = serving(1, "prefill");
    bad["spec"]["replicas"] = json!("three");
    let r = answer(Action::Validate, &request("CREATE", &bad, None))?;
    assert_eq!(r["allowed"], false);
    let msg = r["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("spec.replicas: invalid type: string \"three\""),
        "{msg}"
    );
    // No object on CREATE.
    let mut none: Value = serde_json::from_slice(&request("CREATE", &serving(1, "a"), None))?;
    none["request"]["object"] = Value::Null;
    let r = answer(Action::Validate, &serde_json::to_vec(&none)?)?;
    assert_eq!(r["status"]["message"], "the request has no object");
    Ok(())
}

#[test]
fn delete_and_foreign_kinds_are_allowed() -> TestResult {
    let r = answer(
        Action::Validate,
        &request("DELETE", &serving(-1, "prefill"), None),
    )?;
    assert_eq!(r["allowed"], true);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let r = answer(Action::Mutate, &request("CREATE", &pod, None))?;
    assert_eq!(r["allowed"], true);
    assert_eq!(r.get("patch"), None);
    Ok(())
}

fn base64_decode(s: &str) -> Vec<u8> {
    serde_json::from_value::<k8s_openapi::ByteString>(Value::String(s.to_owned()))
        .map(|b| b.0)
        .unwrap_or_default()
}

/// Found by the `admission_review` fuzz target: the answer took the request's `kind`
/// (and `apiVersion`), which the API server refuses.
#[test]
fn the_answer_is_always_an_admission_review() {
    for (kind, version, want_version) in [
        (
            "Admiss:onReview",
            "admission.k8s.io/v1",
            "admission.k8s.io/v1",
        ),
        (
            "AdmissionReview",
            "admission.k8s.io/v1beta1",
            "admission.k8s.io/v1beta1",
        ),
        ("AdmissionReview", "example.com/v9", "admission.k8s.io/v1"),
    ] {
        let body = json!({
            "apiVersion": version, "kind": kind,
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "x", "namespace": "default", "operation": "CREATE",
                "userInfo": {"username": "admin"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
            },
        });
        for action in [Action::Validate, Action::Mutate] {
            let out = review(action, body.to_string().as_bytes());
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["kind"], "AdmissionReview", "{v}");
            assert_eq!(v["apiVersion"], want_version, "{v}");
            assert_eq!(v["response"]["allowed"], true, "{v}");
            assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        }
    }
}

fn policy_with_bounds(kind: &str, min: i64, max: i64) -> Value {
    let target = json!({"targetRef": {"kind": "ModelServing", "name": "ms"},
                        "metricSources": {"m": {"pod": {}}}});
    let spec = match kind {
        "homogeneousTarget" => {
            json!({"minReplicas": min, "maxReplicas": max, "target": target})
        }
        "heterogeneousTarget" => json!({"params": [
            {"minReplicas": min, "maxReplicas": max, "cost": 1, "target": target}
        ]}),
        _ => json!({"targetRef": {"kind": "ModelServing", "name": "ms"},
                    "roles": {"decode": {"minReplicas": min, "maxReplicas": max,
                                         "metricSources": {"m": {"pod": {}}}}}}),
    };
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"metrics": [{"name": "m", "targetValue": "1"}], kind: spec},
    })
}

#[test]
fn min_replicas_above_max_replicas_is_refused_for_every_target() -> TestResult {
    for (kind, path) in [
        ("homogeneousTarget", "spec.homogeneousTarget.minReplicas"),
        (
            "heterogeneousTarget",
            "spec.heterogeneousTarget.params[0].minReplicas",
        ),
        (
            "disaggregatedTarget",
            "spec.disaggregatedTarget.roles[decode].minReplicas",
        ),
    ] {
        let ok = answer(
            Action::Validate,
            &request("CREATE", &policy_with_bounds(kind, 2, 2), None),
        )?;
        assert_eq!(ok["allowed"], true, "{kind}: {ok}");
        let r = answer(
            Action::Validate,
            &request("CREATE", &policy_with_bounds(kind, 5, 2), None),
        )?;
        assert_eq!(r["allowed"], false, "{kind}");
        let msg = r["status"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(&format!("{path}: minReplicas must be <= maxReplicas")),
            "{kind}: {msg}"
        );
    }
    Ok(())
}

/// The JSON patch the mutating webhook answers for `object`.
fn mutation(object: &Value) -> Result<Value, Box<dyn std::error::Error>> {
    let r = answer(Action::Mutate, &request("CREATE", object, None))?;
    assert_eq!(r["allowed"], true, "{r}");
    let patch = base64_decode(r["patch"].as_str().unwrap_or_default());
    Ok(serde_json::from_slice(&patch)?)
}

#[test]
fn a_target_that_may_reach_zero_gets_a_five_minute_idle_window() -> TestResult {
    for kind in [
        "homogeneousTarget",
        "heterogeneousTarget",
        "disaggregatedTarget",
    ] {
        let patch = mutation(&policy_with_bounds(kind, 0, 2))?;
        let behavior = patch
            .as_array()
            .and_then(|ops| ops.iter().find(|op| op["path"] == "/spec/behavior"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            behavior["value"]["scaleToZero"],
            json!({"idleWindow": "5m"}),
            "{kind}"
        );
        let above = mutation(&policy_with_bounds(kind, 1, 2))?;
        assert!(
            !above.to_string().contains("scaleToZero"),
            "{kind}: {above}"
        );
    }
    let mut kept = policy_with_bounds("homogeneousTarget", 0, 2);
    kept["spec"]["behavior"] = json!({"scaleToZero": {"idleWindow": "90s"}});
    let patch = mutation(&kept)?;
    assert!(!patch.to_string().contains("idleWindow"), "{patch}");
    let mut long = policy_with_bounds("homogeneousTarget", 0, 2);
    long["spec"]["behavior"] = json!({"scaleToZero": {"idleWindow": "25h"}});
    let r = answer(Action::Validate, &request("CREATE", &long, None))?;
    assert_eq!(r["allowed"], false);
    let msg = r["status"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("spec.behavior.scaleToZero.idleWindow: must be between 0s and 24h"),
        "{msg}"
    );
    Ok(())
}
