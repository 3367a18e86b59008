use std::time::Duration;

use kthena_api::{Object, load_str};

use super::*;

fn policy(yaml: &str) -> AutoscalingPolicy {
    let docs = load_str("policy.yaml", yaml).unwrap();
    match docs.into_iter().next().unwrap().object {
        Object::AutoscalingPolicy(p) => *p,
        other => panic!("not a policy: {}", other.kind()),
    }
}

const PD: &str = include_str!(
    "../../../../shared/kthena-manifests/examples/prometheus-autoscaler/disaggregated-autoscaler/autoscalerPolicy.yaml"
);

#[test]
fn an_omitted_behavior_gets_the_webhook_defaults() {
    let p = policy(
        "apiVersion: workload.serving.volcano.sh/v1alpha1\nkind: AutoscalingPolicy\n\
         metadata: {name: p}\nspec:\n  metrics: [{name: q, targetValue: '10'}]\n  \
         homogeneousTarget: {minReplicas: 1, maxReplicas: 4, target: {targetRef: {name: ms}}}\n",
    );
    assert_eq!(behavior_from_api(&p).unwrap(), Behavior::default());
    assert_eq!(tolerance_from_api(&p), 0.1);
    assert_eq!(
        metric_targets("spec.metrics", &p.spec.metrics).unwrap(),
        Metrics::from([("q".to_owned(), 10.0)])
    );
}

#[test]
fn the_disaggregated_example_converts_field_for_field() {
    let p = policy(PD);
    let b = behavior_from_api(&p).unwrap();
    assert_eq!(
        b.scale_down,
        StablePolicy {
            instances: 1,
            percent: 100,
            period: Duration::from_secs(15),
            select_policy: SelectPolicy::Or,
            stabilization_window: Duration::from_secs(30),
        }
    );
    assert_eq!(b.scale_up.instances, 2);
    assert_eq!(
        b.panic,
        PanicPolicy {
            percent: 200,
            period: Duration::from_secs(5),
            panic_threshold_percent: 200,
            panic_mode_hold: Duration::from_secs(30),
        }
    );
    let s = roles_scaler_from_api(&p).unwrap();
    assert_eq!(
        s.role_names().collect::<Vec<_>>(),
        vec!["decode", "prefill"]
    );
    let c = ratio_from_api(
        p.spec
            .disaggregated_target
            .as_ref()
            .unwrap()
            .ratio_constraint
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(c.bounds.min, Ratio::new(25, 100).unwrap());
    assert_eq!(c.bounds.max, Ratio::new(1, 1).unwrap());
    assert!(matches!(
        optimizer_from_api(&p),
        Err(Error::MissingTarget(_))
    ));
}

#[test]
fn heterogeneous_params_and_bad_fields() {
    let p = policy(
        "apiVersion: workload.serving.volcano.sh/v1alpha1\nkind: AutoscalingPolicy\n\
         metadata: {name: p}\nspec:\n  metrics: [{name: q, targetValue: 500m}]\n  \
         behavior: {scaleDown: {period: 1x}}\n  heterogeneousTarget:\n    params:\n    \
         - {cost: 5, minReplicas: 1, maxReplicas: 3, target: {targetRef: {name: a}}}\n    \
         - {minReplicas: 0, maxReplicas: 2, target: {targetRef: {name: b}}}\n",
    );
    let err = optimizer_from_api(&p).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidDuration { path, .. } if path == "spec.behavior.scaleDown.period"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "spec.behavior.scaleDown.period: invalid duration \"1x\" (expected e.g. \"100ms\" or \"1m30s\"): invalid unit: expected one of 'ns', 'us', '\u{00b5}s', 'ms', 's', 'm', or 'h'"
    );
    let mut ok = p.clone();
    ok.spec.behavior = None;
    let o = optimizer_from_api(&ok).unwrap();
    assert_eq!(o.bounds(), (1, 5));
    // b costs 0: its 2 replicas (packages 1 and 1) come before a's.
    assert_eq!(o.distribute(3), vec![1, 2]);
    assert_eq!(
        metric_targets("spec.metrics", &p.spec.metrics).unwrap()["q"],
        0.5
    );
}

#[test]
fn ratio_bounds_that_are_no_ratio_name_their_field() {
    let constraint = |min: &str, max: &str| -> RoleRatioConstraint {
        serde_saphyr::from_str(&format!(
            "{{numeratorRole: prefill, denominatorRole: decode, minRatio: '{min}', maxRatio: '{max}'}}"
        ))
        .unwrap()
    };
    let err = ratio_from_api(&constraint("half", "1")).unwrap_err();
    assert_eq!(
        err,
        Error::InvalidQuantity {
            path: "spec.disaggregatedTarget.ratioConstraint.minRatio".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "spec.disaggregatedTarget.ratioConstraint.minRatio: not a quantity"
    );
    let err = ratio_from_api(&constraint("0.5", "-1")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.disaggregatedTarget.ratioConstraint.maxRatio: invalid ratio \"-1\": must be a finite number ≥ 0"
    );
    assert_eq!(
        ratio_from_api(&constraint("0.5", "2")).unwrap().bounds.max,
        Ratio::new(2, 1).unwrap()
    );
}
