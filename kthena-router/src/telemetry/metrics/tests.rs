use super::*;

#[test]
fn encodes_families_and_labels() {
    let m = Metrics::new();
    let dest = Destination::default();
    m.record_request(&RequestRecord {
        model: &unknown_label(),
        path: "/v1/chat/completions",
        status: 404,
        error_type: Some("route_not_found"),
        dest: &dest,
        duration_secs: 0.001,
        input_tokens: 3,
        output_tokens: 0,
    });
    m.match_ratio("prefix-cache", &Arc::from("m"), 0.5);
    let text = m.encode();
    assert!(text.contains(r#"kthena_router_requests_total{model="unknown",path="/v1/chat/completions",status_code="404",error_type="route_not_found",model_route="none",backend_type="unresolved",backend_name="none",upstream_model="none"} 1"#), "{text}");
    assert!(
        text.contains("kthena_router_request_duration_seconds_bucket{"),
        "{text}"
    );
    assert!(text.contains(r#"token_type="input""#), "{text}");
    assert!(!text.contains(r#"token_type="output""#), "{text}");
    assert!(
        text.contains(r#"kthena_router_prefix_cache_match_ratio_bucket{le="0.5",model="m"} 1"#)
            || text
                .contains(r#"kthena_router_prefix_cache_match_ratio_bucket{model="m",le="0.5"} 1"#),
        "{text}"
    );
}

#[test]
fn equal_labels_from_separate_strings_are_one_series() {
    let m = Metrics::new();
    for (route, status) in [("ns/a", 200), ("ns/a", 200), ("ns/b", 200), ("ns/a", 500)] {
        // A fresh allocation per request, as after a configuration reload.
        let dest = Destination {
            model_route: Arc::from(route),
            backend_type: "model_server",
            backend_name: Arc::from("ns/server"),
            upstream_model: Arc::from("m"),
        };
        m.record_request(&RequestRecord {
            model: &Arc::from("m"),
            path: "/v1/completions",
            status,
            error_type: None,
            dest: &dest,
            duration_secs: 0.001,
            input_tokens: 3,
            output_tokens: 2,
        });
        m.active_upstream(&dest, 1);
    }
    let text = m.encode();
    let series = |prefix: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| {
                let route = l.split("model_route=\"").nth(1).unwrap_or("");
                let route = route.split('"').next().unwrap_or("");
                let status = l.split("status_code=\"").nth(1).map_or("", |s| &s[..3]);
                let value = l.rsplit(' ').next().unwrap_or("");
                format!("{route} {status} {value}")
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        series("kthena_router_requests_total{"),
        ["ns/a 200 2", "ns/a 500 1", "ns/b 200 1"].map(String::from)
    );
    assert_eq!(
        series("kthena_router_request_duration_seconds_count{"),
        ["ns/a 200 2", "ns/a 500 1", "ns/b 200 1"].map(String::from)
    );
    assert_eq!(
        series(
            "kthena_router_tokens_total{model=\"m\",path=\"/v1/completions\",token_type=\"output\""
        ),
        ["ns/a  6", "ns/b  2"].map(String::from)
    );
    assert_eq!(
        series("kthena_router_active_upstream_requests{"),
        ["ns/a  3", "ns/b  1"].map(String::from)
    );
}

/// A client choosing its path (every `POST /v1/*` naming a model is routed) mints no new
/// series: an unknown path is labelled `other`, a known one keeps its path.
#[test]
fn unknown_paths_share_one_series() {
    let m = Metrics::new();
    let dest = Destination::default();
    for path in [
        "/v1/x1",
        "/v1/x2",
        "/llm/v1/chat/completions",
        "/v1/embeddings",
    ] {
        m.record_request(&RequestRecord {
            model: &unknown_label(),
            path,
            status: 404,
            error_type: Some("route_not_found"),
            dest: &dest,
            duration_secs: 0.001,
            input_tokens: 0,
            output_tokens: 0,
        });
    }
    let text = m.encode();
    assert!(text.contains(r#"kthena_router_requests_total{model="unknown",path="other",status_code="404",error_type="route_not_found",model_route="none",backend_type="unresolved",backend_name="none",upstream_model="none"} 3"#), "{text}");
    assert!(
        text.contains(r#"path="/v1/embeddings",status_code="404""#),
        "{text}"
    );
    assert!(!text.contains("/v1/x1"), "{text}");
}
