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
