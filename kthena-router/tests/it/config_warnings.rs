//! What a loaded configuration leaves unserved: warnings in the snapshot, the log, the debug
//! dump and `kthena_router_config_warnings`, kept true on reload; `/readyz` names the models
//! without a ready endpoint.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use crate::common;
use crate::common::{TestRouter, endpoint, get, model_server, simple_route};
use http::StatusCode;

const NOT_FOUND: &str = "ModelRoute default/r2: spec.rules[0].targetModels[0].modelServerName: \
    ModelServer default/srv-b does not exist (did you mean `srv-a`?); requests for this target \
    get 404";
const NOT_SELECTED: &str = "endpoint orphan (namespace default, labels {app: nobody}) is \
    selected by no ModelServer; no request is sent to it";
const NO_ENDPOINTS: &str = "ModelServer default/srv-b: spec.workloadSelector.matchLabels \
    {app: b} selects no endpoint in namespace default; requests routed to it are held until one \
    appears (coldStart), or get 503 with coldStart.enabled: false";

/// `(kind, message)` of every warning of the router's snapshot.
fn kinds_and_messages(r: &TestRouter) -> Vec<(&'static str, String)> {
    let snap = r.router.snapshot();
    snap.warnings
        .iter()
        .map(|w| (w.kind, w.message.clone()))
        .collect()
}

async fn dump(r: &TestRouter) -> serde_json::Value {
    let (status, text) = get(&format!(
        "http://{}/debug/config_dump/warnings",
        r.router.debug_addr
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_str(&text).unwrap()
}

async fn warning_gauge(r: &TestRouter, kind: &str) -> f64 {
    r.metric(&format!("kthena_router_config_warnings{{kind=\"{kind}\"}}"))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_server_and_unselected_endpoint_are_reported_at_load_and_reload() {
    let sim = kthena_sim::spawn(common::sim_config("m1")).await.unwrap();
    // An address nothing listens on: the orphan endpoint is never selected anyway.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let endpoints = format!(
        "{}{}",
        endpoint("sim-a", sim.addr(), "a"),
        endpoint("orphan", free, "nobody")
    );
    let r = TestRouter::start(
        common::LEAST_REQUEST_ONLY,
        &endpoints,
        &[
            ("srv-a.yaml", model_server("srv-a", "m1", "a", "")),
            ("r1.yaml", simple_route("r1", "m1", "srv-a")),
            ("r2.yaml", simple_route("r2", "m2", "srv-b")),
        ],
    )
    .await;
    r.wait_ready().await;

    let messages = kinds_and_messages(&r);
    assert_eq!(
        messages,
        vec![
            ("model_server_not_found", NOT_FOUND.to_owned()),
            ("endpoint_not_selected", NOT_SELECTED.to_owned()),
        ]
    );
    assert_eq!(
        dump(&r).await,
        serde_json::json!({"warnings": [
            {"kind": "model_server_not_found", "message": NOT_FOUND},
            {"kind": "endpoint_not_selected", "message": NOT_SELECTED},
        ]})
    );
    assert_eq!(warning_gauge(&r, "model_server_not_found").await, 1.0);
    assert_eq!(warning_gauge(&r, "endpoint_not_selected").await, 1.0);
    assert_eq!(
        warning_gauge(&r, "model_server_without_endpoints").await,
        0.0
    );

    // Ready (the config loaded), and the body names the model that cannot be served.
    let (status, body) = get(&format!("{}/readyz", r.url())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::json!({
            "message": "router is ready; 1 model(s) have no ready endpoint",
            "modelsWithoutReadyEndpoint": ["m2"],
        })
    );

    // Reload: the missing server appears but selects nothing; the orphan stays unselected.
    let generation = r.router.generation();
    std::fs::write(
        r.manifests().join("srv-b.yaml"),
        model_server("srv-b", "m2", "b", ""),
    )
    .unwrap();
    for _ in 0..250 {
        if r.router.generation() > generation {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(r.router.generation() > generation, "no reload");
    assert_eq!(
        dump(&r).await,
        serde_json::json!({"warnings": [
            {"kind": "model_server_without_endpoints", "message": NO_ENDPOINTS},
            {"kind": "endpoint_not_selected", "message": NOT_SELECTED},
        ]})
    );
    assert_eq!(warning_gauge(&r, "model_server_not_found").await, 0.0);
    assert_eq!(
        warning_gauge(&r, "model_server_without_endpoints").await,
        1.0
    );
    let (status, body) = get(&format!("{}/readyz", r.url())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains(r#""modelsWithoutReadyEndpoint":["m2"]"#),
        "{body}"
    );

    // With every model served, the body is Go Kthena's.
    std::fs::remove_file(r.manifests().join("r2.yaml")).unwrap();
    let generation = r.router.generation();
    for _ in 0..250 {
        if r.router.generation() > generation {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = get(&format!("{}/readyz", r.url())).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, r#"{"message":"router is ready"}"#)
    );
    r.router.shutdown().await;
    sim.shutdown(Duration::from_secs(1)).await;
}

/// A ModelRoute with `rateLimit` is loaded (the limit is enforced; tests/it/ratelimit.rs).
#[test]
fn rate_limited_route_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let route = format!(
        "{}  rateLimit: {{inputTokensPerUnit: 100, unit: minute}}\n",
        simple_route("r1", "m1", "srv-a")
    );
    std::fs::write(dir.path().join("r1.yaml"), route).unwrap();
    let path = dir.path().join("router.yaml");
    let cfg =
        kthena_router::Config::from_yaml(&path, "standalone: {manifests: [r1.yaml]}\n").unwrap();
    let snap = kthena_router::discovery::Loader::new()
        .load(&cfg, None)
        .unwrap();
    let rl = snap.route_objects[0].spec.rate_limit.as_ref().unwrap();
    assert_eq!(rl.input_tokens_per_unit, Some(100));
}

/// A misspelled manifest field (`wieght`) is dropped, as the API server prunes it, but never
/// silently: the target keeps the default weight 100, so a canary split changes. It is a
/// warning of kind `unknown_field` naming the file, the object and the field path.
#[test]
fn unknown_manifest_field_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let route = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: r1, namespace: default}
spec:
  modelName: m1
  rules:
  - targetModels:
    - {modelServerName: srv-a, wieght: 80}
";
    std::fs::write(dir.path().join("r1.yaml"), route).unwrap();
    std::fs::write(
        dir.path().join("srv-a.yaml"),
        model_server("srv-a", "m1", "a", ""),
    )
    .unwrap();
    let path = dir.path().join("router.yaml");
    let cfg = kthena_router::Config::from_yaml(
        &path,
        "standalone:\n  manifests: [r1.yaml, srv-a.yaml]\n  endpoints:\n  - {name: e, address: \
         127.0.0.1:1, labels: {app: a}}\n",
    )
    .unwrap();
    let snap = kthena_router::discovery::Loader::new()
        .load(&cfg, None)
        .unwrap();
    let warnings: Vec<(&str, String)> = snap
        .warnings
        .iter()
        .map(|w| (w.kind, w.message.clone()))
        .collect();
    assert_eq!(
        warnings,
        vec![(
            "unknown_field",
            format!(
                "{}: document 1 (line 1) ModelRoute default/r1: unknown field \
                 `spec.rules[0].targetModels[0].wieght` is ignored",
                dir.path().join("r1.yaml").display()
            )
        )]
    );
}

/// Regression: outside Gateway API mode a ModelRoute bound to a Gateway (`parentRefs`) served
/// nothing and nothing said why; now a `route_needs_gateway_api` warning names it, in
/// standalone mode also when `gatewayApi.enabled` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_bound_to_a_gateway_is_reported_outside_gateway_api_mode() {
    let sim = kthena_sim::spawn(common::sim_config("m1")).await.unwrap();
    let bound = format!(
        "{}  parentRefs: [{{name: default, kind: Gateway}}]\n",
        simple_route("bound", "gw-model", "srv-a")
    );
    // Standalone, gatewayApi.enabled changes nothing: Gateways are read from the cluster.
    let enabled = format!(
        "{}gatewayApi: {{enabled: true}}\n",
        common::LEAST_REQUEST_ONLY
    );
    for head in [common::LEAST_REQUEST_ONLY, enabled.as_str()] {
        let r = TestRouter::start(
            head,
            &endpoint("sim-a", sim.addr(), "a"),
            &[
                ("srv-a.yaml", model_server("srv-a", "m1", "a", "")),
                ("r1.yaml", simple_route("r1", "m1", "srv-a")),
                ("bound.yaml", bound.clone()),
            ],
        )
        .await;
        r.wait_ready().await;
        let warnings = kinds_and_messages(&r);
        assert_eq!(
            warnings,
            vec![(
                "route_needs_gateway_api",
                "ModelRoute default/bound: spec.parentRefs binds it to a Gateway, and Gateway API \
             mode is off (it needs cluster mode with gatewayApi.enabled or \
             --enable-gateway-api); requests for model \"gw-model\" get 404"
                    .to_owned()
            )]
        );
        assert_eq!(
            warning_gauge(&r, "route_needs_gateway_api").await,
            1.0,
            "{head}"
        );
        assert_eq!(warning_gauge(&r, "model_server_not_found").await, 0.0);
        r.router.shutdown().await;
    }
}
