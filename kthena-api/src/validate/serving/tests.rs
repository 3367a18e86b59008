use serde_json::json;

use crate::workload::ModelServing;

/// A defaulted ModelServing of `replicas` groups, one role `a` of `role_replicas`, with
/// `rollout` as `spec.rolloutStrategy` and `role_max` as the role's `maxUnavailable`.
fn serving(
    replicas: i32,
    role_replicas: i32,
    rollout: &serde_json::Value,
    role_max: &serde_json::Value,
) -> ModelServing {
    let ms: ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "ms"},
        "spec": {
            "replicas": replicas,
            "rolloutStrategy": rollout,
            "template": {"roles": [{
                "name": "a",
                "replicas": role_replicas,
                "maxUnavailable": role_max,
                "workerReplicas": 0,
                "entryTemplate": {"spec": {"containers": [{"name": "e", "image": "vllm"}]}},
            }]},
        },
    }))
    .expect("a ModelServing");
    ms.with_defaults()
}

fn errors(ms: &ModelServing) -> Vec<String> {
    ms.validate()
        .err()
        .unwrap_or_default()
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect()
}

fn groups(max: &serde_json::Value) -> serde_json::Value {
    json!({"type": "ServingGroupRollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": max}})
}

/// Regression: `maxUnavailable: 10%` was valid at 10 replicas and refused at 5 (it
/// resolves to 0), so the autoscaler's own scale-down of the object was refused by the
/// webhook. A percentage is valid at any replica count; only 0 and `0%` are refused.
#[test]
fn a_percentage_max_unavailable_stays_valid_at_any_replica_count() {
    for replicas in [10, 5, 1, 0] {
        let ms = serving(replicas, 1, &groups(&json!("10%")), &json!(1));
        assert_eq!(errors(&ms), Vec::<String>::new(), "replicas {replicas}");
    }
    let path = "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable";
    for zero in [json!(0), json!("0%")] {
        let ms = serving(10, 1, &groups(&zero), &json!(1));
        assert_eq!(
            errors(&ms),
            [format!("{path}: maxUnavailable must not resolve to 0")],
            "{zero}"
        );
    }
}

/// Regression, as above for `RoleRollingUpdate`: a role's `maxUnavailable` of `50%` or
/// `3` stays valid when the role's replicas drop to 1; 0 and `0%` are refused.
#[test]
fn a_role_max_unavailable_stays_valid_when_role_replicas_drop() {
    let role = json!({"type": "RoleRollingUpdate"});
    for max in [json!("50%"), json!(3), json!(1)] {
        let ms = serving(1, 1, &role, &max);
        assert_eq!(errors(&ms), Vec::<String>::new(), "{max}");
    }
    for zero in [json!(0), json!("0%")] {
        let ms = serving(1, 4, &role, &zero);
        assert_eq!(
            errors(&ms),
            [
                "spec.template.roles[0].maxUnavailable: maxUnavailable must resolve to between 1 and 4"
            ],
            "{zero}"
        );
    }
}
