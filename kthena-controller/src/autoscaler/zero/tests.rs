use kthena_autoscale::{Blocked, Idleness, ZeroView};
use serde_json::json;

use super::*;

fn policy(behavior: &serde_json::Value) -> AutoscalingPolicy {
    serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "AutoscalingPolicy",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "metrics": [{"name": "m", "targetValue": 1}],
            "behavior": behavior,
            "homogeneousTarget": {"target": {"targetRef": {"name": "ms"}}, "minReplicas": 0, "maxReplicas": 2},
        },
    }))
    .unwrap()
}

#[test]
fn the_idle_window_defaults_to_five_minutes() {
    assert_eq!(
        idle_window(&policy(&json!({}))).unwrap(),
        Duration::from_secs(300)
    );
    let three = policy(&json!({"scaleToZero": {"idleWindow": "3s"}}));
    assert_eq!(idle_window(&three).unwrap(), Duration::from_secs(3));
    let bad = policy(&json!({"scaleToZero": {"idleWindow": "soon"}}));
    let e = idle_window(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("spec.behavior.scaleToZero.idleWindow: "),
        "{e}"
    );
}

#[test]
fn the_condition_says_why_the_target_cannot_go_to_zero() {
    let blocked = ZeroView {
        demand: false,
        idleness: Idleness::Blocked(Blocked::RouterUnanswered("127.0.0.9:9090".to_owned())),
    };
    assert_eq!(
        condition(&blocked, 1),
        (
            false,
            "Blocked",
            "router 127.0.0.9:9090 did not answer; the target is not scaled to 0 replicas while this lasts".to_owned()
        )
    );
    let none = ZeroView {
        demand: false,
        idleness: Idleness::Blocked(Blocked::NoRouterService),
    };
    assert_eq!(
        condition(&none, 1).2,
        "no router metrics Service is configured; the target is not scaled to 0 replicas while this lasts"
    );
    // At zero the same cause means nothing the routers hold can wake the target.
    assert_eq!(
        condition(&blocked, 0).2,
        "router 127.0.0.9:9090 did not answer; requests held by the routers cannot wake the target while this lasts"
    );
    let busy = ZeroView {
        demand: false,
        idleness: Idleness::Busy(2.0),
    };
    assert_eq!(condition(&busy, 1).1, "Enabled");
    assert_eq!(condition(&busy, 0).1, "AtZero");
}
