use serde_json::json;

use super::*;

fn policy(name: &str, created: &str, spec: &serde_json::Value) -> AutoscalingPolicy {
    serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
        "spec": spec,
    }))
    .expect("a policy")
}

fn homogeneous(target: &str) -> serde_json::Value {
    json!({"metrics": [], "homogeneousTarget": {
        "target": {"targetRef": {"kind": "ModelServing", "name": target}},
        "minReplicas": 1, "maxReplicas": 4,
    }})
}

/// Regression: two policies on one ModelServing (minReplicas 1 and 3) scaled it 3 → 1 →
/// 3 every round and both reported Ready. The older one is applied; the newer one is not,
/// whatever their order in the list.
#[test]
fn the_older_of_two_policies_on_one_target_is_applied() {
    let older = policy("asp1", "2026-01-01T00:00:00Z", &homogeneous("ms"));
    let newer = policy("asp3", "2026-01-01T00:05:00Z", &homogeneous("ms"));
    let other = policy("asp9", "2026-01-01T00:09:00Z", &homogeneous("other"));
    for list in [
        vec![older.clone(), newer.clone(), other.clone()],
        vec![other, newer, older],
    ] {
        let c = conflicts(&list);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            c["ns/asp3"].to_string(),
            "ModelServing ns/ms is already scaled by AutoscalingPolicy ns/asp1, the older \
             of the two; this policy is not applied while both target it"
        );
    }
}

/// A heterogeneous policy that shares one of its targets conflicts; a disaggregated
/// policy (roles' replicas) and a homogeneous one (`spec.replicas`) on the same
/// ModelServing write different fields and do not.
#[test]
fn conflicts_are_per_written_field() {
    let hetero = json!({"metrics": [], "heterogeneousTarget": {"params": [
        {"target": {"targetRef": {"name": "a"}}, "minReplicas": 1, "maxReplicas": 4},
        {"target": {"targetRef": {"name": "ms", "namespace": "ns"}}, "minReplicas": 1, "maxReplicas": 4},
    ]}});
    let roles = json!({"disaggregatedTarget": {
        "targetRef": {"kind": "ModelServing", "name": "ms"},
        "roles": {},
    }});
    let list = [
        policy("h", "2026-01-01T00:00:00Z", &homogeneous("ms")),
        policy("x", "2026-01-01T00:01:00Z", &hetero),
        policy("d", "2026-01-01T00:02:00Z", &roles),
    ];
    let c = conflicts(&list);
    let mut keys: Vec<&String> = c.keys().collect();
    keys.sort();
    assert_eq!(keys, ["ns/x"]);
}
