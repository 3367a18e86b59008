//! Unit tests of the status a round writes.

use kthena_autoscale::{Decision, InvalidSample, Mode};

use super::*;
use crate::autoscaler::prometheus::QueryError;

fn policy(status: Option<AutoscalingPolicyStatus>) -> AutoscalingPolicy {
    let mut p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p", "namespace": "ns", "generation": 1},
        "spec": {"metrics": [{"name": "m", "targetValue": "1"}],
                 "homogeneousTarget": {"minReplicas": 1, "maxReplicas": 4,
                     "target": {"targetRef": {"name": "ms"}, "metricSources": {"m": {"pod": {}}}}}},
    }))
    .unwrap();
    p.status = status;
    p
}

fn skipped() -> Outcome {
    Outcome::Skipped {
        target: "ms".to_owned(),
        current: 1,
    }
}

fn decided(to: i32) -> Outcome {
    Outcome::Decided {
        target: "ms".to_owned(),
        decision: Decision {
            current: 1,
            recommended: to,
            corrected: to,
            mode: Mode::Stable,
        },
        scaled: to != 1,
    }
}

fn ready(st: &AutoscalingPolicyStatus) -> &Condition {
    st.conditions.iter().find(|c| c.type_ == "Ready").unwrap()
}

/// A round that decides after one that had no value says so: the message is the new round's,
/// not the first one's (the condition's status stays True, so only its text changes).
#[test]
fn the_ready_message_follows_the_latest_round() {
    let first = next_status(&policy(None), skipped(), &[]);
    assert_eq!(ready(&first).message, KEPT);
    let since = ready(&first).last_transition_time.clone();
    let second = next_status(&policy(Some(first)), decided(3), &[]);
    let r = ready(&second);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str(), r.message.as_str()),
        (
            "True",
            "Reconciled",
            "homogeneous autoscaling policy reconciled"
        )
    );
    assert_eq!(r.last_transition_time, since, "no transition: same status");
}

/// `desiredReplicas` is absent until a decision was made (never a `0` nobody decided).
#[test]
fn desired_replicas_is_absent_until_a_decision() {
    let st = next_status(&policy(None), skipped(), &[]);
    let h = serde_json::to_value(&st).unwrap()["homogeneousStatus"].clone();
    assert_eq!(h, json!({"name": "ms", "currentReplicas": 1}));
    let st = next_status(&policy(Some(st)), decided(3), &[]);
    let h = st.homogeneous_status.clone().unwrap();
    assert_eq!(h.desired_replicas, Some(3));
    // A later round without a value keeps the last decision.
    let st = next_status(&policy(Some(st)), skipped(), &[]);
    assert_eq!(st.homogeneous_status.unwrap().desired_replicas, Some(3));
}

/// A value that is no sample, or a failed Prometheus query, shows in `Ready` with its pod,
/// metric and value or its cause.
#[test]
fn problems_make_ready_false_with_what_and_where() {
    let nan = Problem::PodValue {
        metric: "m".to_owned(),
        pod: "ns/ms-0".to_owned(),
        value: f64::NAN,
        why: InvalidSample::NotANumber,
    };
    let st = next_status(&policy(None), skipped(), &[nan]);
    let r = ready(&st);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "InvalidMetricValue")
    );
    assert_eq!(
        r.message,
        "pod ns/ms-0 metric m: value NaN is not a number; sample skipped; \
         no metric value this round; replicas kept"
    );
    let down = Problem::Prometheus {
        metric: "m".to_owned(),
        server: "http://127.0.0.1:1".to_owned(),
        error: QueryError::Timeout,
    };
    let st = next_status(&policy(Some(st)), skipped(), &[down]);
    let r = ready(&st);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "MetricUnavailable")
    );
    assert_eq!(
        r.message,
        "metric m from Prometheus http://127.0.0.1:1: no answer within 3s; \
         no metric value this round; replicas kept"
    );
    // The next clean round is Ready again.
    let st = next_status(&policy(Some(st)), decided(2), &[]);
    assert_eq!(ready(&st).status, "True");
}
