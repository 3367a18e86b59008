use serde_json::json;

use crate::workload::AutoscalingPolicy;

/// `path: message` of every error of a homogeneous policy whose only metric source is
/// `source`.
fn errors(source: &serde_json::Value) -> Vec<String> {
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "metrics": [{"name": "m", "targetValue": 10}],
            "homogeneousTarget": {
                "target": {"targetRef": {"name": "ms"}, "metricSources": {"m": source}},
                "minReplicas": 1,
                "maxReplicas": 3,
            },
        },
    }))
    .expect("a policy");
    match p.with_defaults().validate() {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
    }
}

const AT: &str = "spec.homogeneousTarget.target.metricSources[m]";

#[test]
fn prometheus_auth_and_tls_are_checked_with_their_paths() {
    let ok = json!({"prometheus": {
        "serverURL": "https://prom:9090", "query": "up",
        "auth": {"basicAuth": {"username": {"name": "s", "key": "u"},
                               "password": {"name": "s", "key": "p"}}},
        "tlsConfig": {"ca": {"configMap": {"name": "ca", "key": "ca.crt"}},
                      "serverName": "prom.example"},
    }});
    assert_eq!(errors(&ok), Vec::<String>::new());
    let bad = json!({"prometheus": {
        "serverURL": "http://prom:9090", "query": "up",
        "auth": {"authorization": {"type": "Basic", "credentials": {"name": "s"}},
                 "basicAuth": {"password": {"name": "", "key": "p"}}},
        "tlsConfig": {"ca": {"secret": {"name": "s", "key": "ca"},
                             "configMap": {"name": "c", "key": "ca"}},
                      "serverName": ""},
    }});
    let p = format!("{AT}.prometheus");
    assert_eq!(
        errors(&bad),
        [
            format!("{p}.auth: authorization and basicAuth are mutually exclusive"),
            format!("{p}.auth: credentials are only sent over TLS: use an https:// serverURL"),
            format!("{p}.auth.authorization.type: Basic is not allowed here: use basicAuth"),
            format!("{p}.auth.authorization.credentials.key: must not be empty"),
            format!("{p}.auth.basicAuth.username: is required"),
            format!("{p}.auth.basicAuth.password.name: must not be empty"),
            format!("{p}.tlsConfig: only allowed with an https:// serverURL"),
            format!("{p}.tlsConfig.ca: secret and configMap are mutually exclusive"),
            format!("{p}.tlsConfig.serverName: must not be empty"),
        ]
    );
    let no_credentials = json!({"prometheus": {
        "serverURL": "https://prom", "query": "up",
        "auth": {"authorization": {"type": "Bearer token"}},
        "tlsConfig": {"ca": {}},
    }});
    assert_eq!(
        errors(&no_credentials),
        [
            format!("{p}.auth.authorization.type: must be a single word such as Bearer"),
            format!("{p}.auth.authorization.credentials: is required"),
            format!("{p}.tlsConfig.ca: one of secret and configMap is required"),
        ]
    );
}

#[test]
fn match_expressions_follow_kubernetes_label_selector_rules() {
    let source =
        |exprs: serde_json::Value| json!({"pod": {"labelSelector": {"matchExpressions": exprs}}});
    let ok = source(json!([
        {"key": "a", "operator": "In", "values": ["x"]},
        {"key": "b", "operator": "NotIn", "values": ["y", "z"]},
        {"key": "c", "operator": "Exists"},
        {"key": "d", "operator": "DoesNotExist", "values": []},
    ]));
    assert_eq!(errors(&ok), Vec::<String>::new());
    let bad = source(json!([
        {"key": "a", "operator": "In"},
        {"key": "b", "operator": "Exists", "values": ["y"]},
        {"key": "", "operator": "Gt", "values": ["1"]},
    ]));
    let p = format!("{AT}.pod.labelSelector.matchExpressions");
    assert_eq!(
        errors(&bad),
        [
            format!("{p}[0].values: must be specified when `operator` is 'In' or 'NotIn'"),
            format!(
                "{p}[1].values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            ),
            format!("{p}[2].key: must not be empty"),
            format!(
                "{p}[2].operator: Unsupported value: \"Gt\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""
            ),
        ]
    );
}

/// A policy from `spec` (JSON), defaulted.
fn defaulted(spec: &serde_json::Value) -> AutoscalingPolicy {
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    }))
    .expect("a policy");
    p.with_defaults()
}

fn idle_window(p: &AutoscalingPolicy) -> Option<String> {
    let b = p.spec.behavior.as_ref()?;
    let w = b.scale_to_zero.as_ref()?.idle_window.as_ref()?;
    Some(w.as_str().to_owned())
}

fn homogeneous(min: i32, behavior: &serde_json::Value) -> serde_json::Value {
    json!({
        "metrics": [{"name": "m", "targetValue": 10}],
        "behavior": behavior,
        "homogeneousTarget": {"target": {"targetRef": {"name": "ms"}}, "minReplicas": min, "maxReplicas": 3},
    })
}

#[test]
fn idle_window_defaults_to_five_minutes_only_when_a_target_may_reach_zero() {
    assert_eq!(
        idle_window(&defaulted(&homogeneous(0, &json!({})))).as_deref(),
        Some("5m")
    );
    assert_eq!(idle_window(&defaulted(&homogeneous(1, &json!({})))), None);
    let kept = homogeneous(0, &json!({"scaleToZero": {"idleWindow": "30s"}}));
    assert_eq!(idle_window(&defaulted(&kept)).as_deref(), Some("30s"));
    let empty = homogeneous(0, &json!({"scaleToZero": {}}));
    assert_eq!(idle_window(&defaulted(&empty)).as_deref(), Some("5m"));
    let hetero = json!({
        "metrics": [{"name": "m", "targetValue": 10}],
        "heterogeneousTarget": {"params": [
            {"target": {"targetRef": {"name": "a"}}, "minReplicas": 1, "maxReplicas": 2},
            {"target": {"targetRef": {"name": "b"}}, "minReplicas": 0, "maxReplicas": 2},
        ]},
    });
    assert_eq!(idle_window(&defaulted(&hetero)).as_deref(), Some("5m"));
    let roles = json!({
        "metrics": [{"name": "m", "targetValue": 10}],
        "disaggregatedTarget": {"targetRef": {"name": "ms"}, "roles": {
            "prefill": {"minReplicas": 0, "maxReplicas": 2},
            "decode": {"minReplicas": 0, "maxReplicas": 2},
        }},
    });
    assert_eq!(idle_window(&defaulted(&roles)).as_deref(), Some("5m"));
}

#[test]
fn idle_window_is_checked_with_its_path() {
    let errs = |w: &str| -> Vec<String> {
        let p = defaulted(&homogeneous(0, &json!({"scaleToZero": {"idleWindow": w}})));
        match p.validate() {
            Ok(()) => Vec::new(),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        }
    };
    assert_eq!(errs("0s"), Vec::<String>::new());
    assert_eq!(errs("24h"), Vec::<String>::new());
    let path = "spec.behavior.scaleToZero.idleWindow";
    assert_eq!(
        errs("24h1s"),
        [format!("{path}: must be between 0s and 24h")]
    );
    let bad = errs("soon");
    assert_eq!(bad.len(), 1);
    assert!(bad[0].starts_with(&format!("{path}: ")), "{bad:?}");
}
