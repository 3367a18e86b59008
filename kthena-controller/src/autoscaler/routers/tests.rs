use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use super::*;

#[test]
fn the_flag_is_namespace_slash_name() {
    let svc: RouterMetrics = "kthena-system/kthena-router-metrics".parse().unwrap();
    assert_eq!(svc.namespace, "kthena-system");
    assert_eq!(svc.name, "kthena-router-metrics");
    assert_eq!(svc.to_string(), "kthena-system/kthena-router-metrics");
    for bad in ["kthena-router-metrics", "/x", "ns/", "a/b/c"] {
        let e = bad.parse::<RouterMetrics>().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("--router-metrics-service {bad:?}: expected <namespace>/<name>")
        );
    }
}

fn slice(v: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(v).unwrap()
}

#[test]
fn ready_addresses_on_the_metrics_port_else_the_first() {
    let named = slice(json!({
        "metadata": {"name": "a"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
        "endpoints": [
            {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
            {"addresses": ["10.0.0.3"], "conditions": {"ready": false}},
            {"addresses": ["10.0.0.1"]},
        ],
    }));
    let unnamed = slice(json!({
        "metadata": {"name": "b"}, "addressType": "IPv6",
        "ports": [{"port": 9091}, {"port": 9092}],
        "endpoints": [{"addresses": ["fd00::1"]}, {"addresses": ["10.0.0.2"]}],
    }));
    let no_port = slice(json!({
        "metadata": {"name": "c"}, "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.9"]}],
    }));
    assert_eq!(
        endpoints(&[named, unnamed, no_port]),
        [
            "10.0.0.1:9090",
            "10.0.0.2:9090",
            "10.0.0.2:9091",
            "[fd00::1]:9091"
        ]
    );
}

#[test]
fn held_requests_are_summed_over_models_and_idle_seconds_kept_per_model_server() {
    let text = "# TYPE kthena_router_cold_start_held_requests gauge\n\
        kthena_router_cold_start_held_requests{model=\"a\",model_server=\"ns/x\"} 2\n\
        kthena_router_cold_start_held_requests{model=\"lora-1\",model_server=\"ns/x\"} 1\n\
        kthena_router_cold_start_held_requests{model=\"b\",model_server=\"ns/y\"} 0\n\
        # TYPE kthena_router_model_server_idle_seconds gauge\n\
        kthena_router_model_server_idle_seconds{model_server=\"ns/x\"} 0\n\
        kthena_router_model_server_idle_seconds{model_server=\"ns/y\"} 312.5\n\
        kthena_router_requests_total{model=\"a\"} 7\n";
    let s = sample(text).unwrap();
    assert_eq!(s.held.get("ns/x"), Some(&3.0));
    assert_eq!(s.held.get("ns/y"), Some(&0.0));
    assert_eq!(s.idle.get("ns/x"), Some(&0.0));
    assert_eq!(s.idle.get("ns/y"), Some(&312.5));
    assert_eq!(sample("").unwrap(), RouterSample::default());
    assert_eq!(sample("<html>oops</html>"), None);
}
