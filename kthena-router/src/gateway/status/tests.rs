use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;

fn gateway(listeners: &serde_json::Value) -> Gateway {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "ns", "generation": 3},
        "spec": {"gatewayClassName": "kthena-router", "listeners": listeners},
    }))
    .unwrap()
}

fn summary(c: &[Condition]) -> Vec<(String, String, String)> {
    c.iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

/// Regression: the GatewayClass stayed `Accepted: Unknown` (the CRD's default).
#[test]
fn the_router_accepts_the_classes_it_controls_once_per_generation() {
    let class = |controller: &str, status: serde_json::Value| -> GatewayClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "kthena-router", "generation": 2},
            "spec": {"controllerName": controller},
            "status": status,
        }))
        .unwrap()
    };
    let pending = serde_json::json!({"conditions": [
            {"type": "Accepted", "status": "Unknown", "reason": "Pending",
             "message": "Waiting for controller", "lastTransitionTime": "1970-01-01T00:00:00Z"},
            {"type": "SupportedVersion", "status": "True", "reason": "SupportedVersion",
             "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z"}]});
    let ours = class(CONTROLLER_NAME, pending.clone());
    let st = gateway_class_status(&ours).unwrap();
    let got: Vec<_> = st
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.observed_generation,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("Accepted", "True", "Accepted", Some(2)),
            ("SupportedVersion", "True", "SupportedVersion", None)
        ]
    );
    assert_eq!(st.conditions[0].message, CLASS_ACCEPTED);
    // Written: nothing more to do until the generation changes.
    let mut done = ours;
    done.status = Some(st);
    assert!(gateway_class_status(&done).is_none());
    done.metadata.generation = Some(3);
    let again = gateway_class_status(&done).unwrap();
    assert_eq!(again.conditions[0].observed_generation, Some(3));
    // Another controller's class is left alone.
    assert!(gateway_class_status(&class("example.com/other", pending)).is_none());
}

#[test]
fn gateway_programmed_only_when_every_listener_port_is_open() {
    let gw = gateway(&serde_json::json!([{"name": "a", "port": 8080, "protocol": "HTTP"}]));
    let table = GatewayTable::compile(&[Arc::new(gw.clone())], &[], &[], &[]);
    let st = gateway_status(&gw, &table, &HashMap::new());
    let s = |t: &str, v: &str, r: &str| (t.to_owned(), v.to_owned(), r.to_owned());
    assert_eq!(
        summary(&st.conditions),
        [
            s("Accepted", "True", "Accepted"),
            s("Programmed", "True", "Programmed")
        ]
    );
    assert_eq!(st.conditions[0].observed_generation, Some(3));
    assert_eq!(st.listeners[0].supported_kinds[0].kind, "HTTPRoute");
    assert!(gateway_status_changed(&gw, &st));
    // Unchanged conditions keep their transition time and need no write.
    let mut written = gw;
    written.status = Some(st.clone());
    let again = gateway_status(&written, &table, &HashMap::new());
    assert!(!gateway_status_changed(&written, &again));
    assert_eq!(
        again.conditions[0].last_transition_time,
        st.conditions[0].last_transition_time
    );

    let gw = gateway(&serde_json::json!([
            {"name": "a", "port": 8080, "protocol": "HTTP"},
            {"name": "b", "port": 9, "protocol": "HTTP"}]));
    let taken = HashMap::from([(9, "listen tcp 127.0.0.1:9: in use".to_owned())]);
    let st = gateway_status(&gw, &table, &taken);
    assert_eq!(
        summary(&st.conditions)[1],
        s("Programmed", "False", "Invalid")
    );
    assert!(
        st.conditions[1]
            .message
            .starts_with("Listener \"b\" failed: listen tcp 127.0.0.1:9: in use")
    );
    assert_eq!(
        summary(&st.listeners[1].conditions)[0],
        s("Accepted", "False", "PortUnavailable")
    );
}

#[test]
fn route_status_per_kthena_parent_with_resolved_refs() {
    let route: HTTPRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "app"},
            "spec": {
                "parentRefs": [{"name": "gw", "namespace": "ns"}, {"name": "elsewhere"}],
                "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "p"}]}],
            },
        }))
        .unwrap();
    let kthena = vec!["ns/gw".to_owned()];
    let st = route_status(&route, &kthena, &GatewayTable::default()).unwrap();
    assert_eq!(st.parents.len(), 1);
    assert_eq!(st.parents[0].controller_name, CONTROLLER_NAME);
    let c = &st.parents[0].conditions;
    assert_eq!(
        (c[1].status.as_str(), c[1].reason.as_str()),
        ("False", "BackendNotFound")
    );
    assert_eq!(
        c[1].message,
        "InferencePool \"p\" not found in namespace \"app\""
    );
    assert!(route_status(&route, &[], &GatewayTable::default()).is_none());
}
