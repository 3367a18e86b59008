use super::*;

fn pod(name: &str, labels: &[(&str, &str)], ip: &str, ready: bool) -> Arc<Pod> {
    let v = serde_json::json!({
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<std::collections::BTreeMap<_, _>>(),
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        },
    });
    Arc::new(serde_json::from_value(v).unwrap())
}

fn server(name: &str, ns: &str, app: &str, port: i32) -> ModelServer {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "inferenceEngine": "vLLM",
            "workloadSelector": {"matchLabels": {"app": app}},
            "workloadPort": {"port": port},
        },
    }))
    .unwrap()
}

#[test]
fn ready_selected_pods_become_endpoints_at_the_first_servers_port() {
    let pods = vec![
        pod("b", &[("app", "m")], "127.0.0.3", true),
        pod("a", &[("app", "m"), ("x", "y")], "127.0.0.2", true),
        pod("not-ready", &[("app", "m")], "127.0.0.4", false),
        pod("unselected", &[("app", "other")], "127.0.0.5", true),
        pod("v6", &[("app", "m")], "::1", true),
    ];
    let servers = vec![
        server("z-second", "ns", "m", 9000),
        server("a-first", "ns", "m", 8001),
        server("elsewhere", "other-ns", "other", 7000),
    ];
    let eps = pod_endpoints(&pods, &servers);
    let got: Vec<(&str, &str)> = eps
        .iter()
        .map(|e| (e.name.as_str(), e.address.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", "127.0.0.2:8001"),
            ("b", "127.0.0.3:8001"),
            ("v6", "[::1]:8001")
        ]
    );
    assert_eq!(eps[0].namespace, "ns");
    assert_eq!(eps[0].labels.get("x").map(String::as_str), Some("y"));
}

#[test]
fn deleting_pending_or_ipless_pods_are_not_ready() {
    let mut p = (*pod("a", &[], "127.0.0.2", true)).clone();
    assert!(pod_is_ready(&p));
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::UNIX_EPOCH,
    ));
    assert!(!pod_is_ready(&p));
    let mut p = (*pod("a", &[], "127.0.0.2", true)).clone();
    if let Some(st) = p.status.as_mut() {
        st.phase = Some("Pending".into());
    }
    assert!(!pod_is_ready(&p));
    let mut p = (*pod("a", &[], "", true)).clone();
    assert!(!pod_is_ready(&p));
    p.status = None;
    assert!(!pod_is_ready(&p));
}

#[test]
fn port_zero_falls_back_to_the_engine_default() {
    let pods = vec![pod("a", &[("app", "m")], "127.0.0.2", true)];
    let mut s = server("s", "ns", "m", 0);
    assert_eq!(
        pod_endpoints(&pods, &[s.clone()])[0].address,
        "127.0.0.2:8000"
    );
    s.spec.inference_engine = InferenceEngine::SgLang;
    assert_eq!(pod_endpoints(&pods, &[s])[0].address, "127.0.0.2:30000");
}
