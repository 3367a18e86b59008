//! Scale to zero and back on the real API server: the ModelServing controller, the
//! autoscaler, the simulated node (engines that take 5 s to load their model) and the router in
//! cluster mode holding requests while the model wakes.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::AutoscalingPolicy;
use kthena_testenv::TestNamespace;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{WAIT, WAITING, http, replicas, routed_model};

/// The model's loading time in the engines of these tests.
const LOADING: Duration = Duration::from_secs(5);
/// The engines' port: not the 8100 of the other tests, whose routers may still hold a deleted
/// pod's `address:8100` for a moment after the node gave that address to a pod of this test
/// (a request of theirs would then reach this test's loading engine).
const PORT: u16 = 8177;
/// The policy's idle window.
const IDLE: Duration = Duration::from_secs(3);

/// A one-role ModelServing at `replicas` whose engines (model `m`, port [`PORT`]) load for
/// `loading`.
async fn create_serving(
    ns: &TestNamespace,
    name: &str,
    replicas: i32,
    loading: Duration,
) -> Result<()> {
    let delay = loading.as_millis().to_string();
    let args = ["--model", "m", "--startup-delay-ms", &delay];
    super::create_serving_of(ns, name, replicas, PORT, &args).await
}

/// A homogeneous policy on `target`, 0..=2 replicas, scaling to zero after [`IDLE`].
async fn create_policy(ns: &TestNamespace, target: &str) -> Result<()> {
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": format!("{target}-policy"), "namespace": ns.name()},
        "spec": {
            "metrics": [{"name": WAITING, "targetValue": "2"}],
            "behavior": {
                "scaleDown": {"instances": 0, "percent": 100, "period": "1m",
                              "stabilizationWindow": "2s"},
                "scaleToZero": {"idleWindow": format!("{}s", IDLE.as_secs())},
            },
            "homogeneousTarget": {
                "minReplicas": 0,
                "maxReplicas": 2,
                "target": {"targetRef": {"kind": "ModelServing", "name": target},
                           "metricSources": {WAITING: {"pod": {"port": PORT}}}},
            },
        },
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    Ok(())
}

/// The router in cluster mode (ModelServer `target` selecting the ModelServing's pods, a
/// ModelRoute for [`routed_model`]) holding requests for `hold`, and the selector-less
/// Service `kthena-router-metrics` with an EndpointSlice naming its metrics listener, which
/// the autoscaler scrapes. The router binds the machine's own non-loopback address: the API
/// server refuses loopback addresses in an EndpointSlice.
async fn router(ns: &TestNamespace, target: &str, hold: &str) -> Result<kthena_router::Router> {
    super::model_server_and_route(ns, target, json!({"workloadPort": {"port": PORT}})).await?;
    let ip = crate::autoscaler_zero::host_ip()?;
    let text = format!(
        "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: {ip}\naccessLog: {{enabled: false}}\ncoldStart: {{holdTimeout: {hold}, retryAfter: 7s}}\n"
    );
    let path = std::path::Path::new("router.yaml");
    let cfg = kthena_router::Config::from_yaml(path, &text)?.validate(path)?;
    let router = kthena_router::Router::start_in_cluster(cfg, ns.client().clone()).await?;
    let m = router.metrics_addr;
    let service = "kthena-router-metrics";
    crate::autoscaler_zero::router_service(ns, service, &m.ip().to_string(), m.port()).await?;
    Ok(router)
}

/// Pods of the ModelServing `name`.
async fn pods(ns: &TestNamespace, name: &str) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={name}"));
    Ok(ns.api::<Pod>().list(&lp).await?.items)
}

/// Waits until `name` has `n` replicas and as many pods; returns how long it took.
async fn until_replicas(ns: &TestNamespace, name: &str, n: i32, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let (r, p) = (replicas(ns, name).await?, pods(ns, name).await?.len());
        if r == n && p == usize::try_from(n)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{name}: replicas {r} and {p} pods, not {n}, after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sum of the series of `family` on the router's metrics listener whose labels contain
/// every `label="value"` of `labels`.
async fn router_metric(
    router: &kthena_router::Router,
    family: &str,
    labels: &[&str],
) -> Result<f64> {
    let req = http::Request::get(format!("http://{}/metrics", router.metrics_addr))
        .body(Full::new(Bytes::new()))?;
    let body = super::body_of(req).await?;
    let text = String::from_utf8(body.to_vec())?;
    Ok(text
        .lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// What a client saw of one request.
#[derive(Debug)]
struct Seen {
    status: u16,
    retry_after: Option<String>,
    /// Since the burst started: when the response head arrived, when the body ended.
    head: Duration,
    end: Duration,
    body: String,
}

/// `n` concurrent chat completions of `model` through `addr`, every other one streaming.
fn burst(addr: &str, model: &str, n: usize, start: Instant) -> JoinSet<Result<(bool, Seen)>> {
    let mut set = JoinSet::new();
    for i in 0..n {
        let (url, model) = (
            format!("http://{addr}/v1/chat/completions"),
            model.to_owned(),
        );
        let stream = i % 2 == 0;
        set.spawn(async move {
            let body = json!({"model": model, "stream": stream, "max_tokens": 8,
                              "messages": [{"role": "user", "content": format!("wake {i}")}]});
            let req = http::Request::post(url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))?;
            let resp = http().request(req).await?;
            let head = start.elapsed();
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let bytes = resp.into_body().collect().await?.to_bytes();
            let seen = Seen {
                status,
                retry_after,
                head,
                end: start.elapsed(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            };
            Ok((stream, seen))
        });
    }
    set
}

/// Waits until `family{labels}` on the router reads `want`.
async fn until_metric(
    router: &kthena_router::Router,
    family: &str,
    labels: &[&str],
    want: f64,
) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = router_metric(router, family, labels).await?;
        if (got - want).abs() < f64::EPSILON {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{family}{labels:?} is {got}, not {want}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the router's snapshot has the ModelRoute of `model` and the ModelServer
/// `server` (its debug listener's config dump).
async fn until_known(router: &kthena_router::Router, model: &str, server: &str) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut known = true;
        for (kind, name) in [("modelroutes", model), ("modelservers", server)] {
            let url = format!("http://{}/debug/config_dump/{kind}", router.debug_addr);
            let req = http::Request::get(url).body(Full::new(Bytes::new()))?;
            let body = super::body_of(req).await?;
            known &= String::from_utf8_lossy(&body).contains(name);
        }
        if known {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the router never knew model {model} and server {server}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_idle_model_goes_to_zero_and_twenty_held_requests_wake_it() -> Result<()> {
    let env = super::setup("as-zero").await?;
    let ns = &env.ns;
    create_serving(ns, "llm", 1, LOADING).await?;
    let router = router(ns, "llm", "60s").await?;
    let (model, server) = (
        routed_model(ns),
        format!("model_server=\"{}/llm\"", ns.name()),
    );
    super::until_routed(&router.addr.to_string(), &model).await?;
    create_policy(ns, "llm").await?;
    // Idle: no request for the window, so the ModelServing goes to 0 and its pod away.
    until_replicas(ns, "llm", 0, WAIT).await?;

    let model_label = format!("model=\"{model}\"");
    let released = "kthena_router_cold_start_requests_total";
    let outcome = "outcome=\"released\"";
    let waits = "kthena_router_cold_start_wait_seconds_count";
    // The first request above waited for the first pod to load: counted already.
    let released_before = router_metric(&router, released, &[&model_label, outcome]).await?;
    let waits_before = router_metric(&router, waits, &[&model_label]).await?;
    let start = Instant::now();
    let mut clients = burst(&router.addr.to_string(), &model, 20, start);
    let held = "kthena_router_cold_start_held_requests";
    until_metric(&router, held, &[&model_label, &server], 20.0).await?;
    let mut seen = Vec::new();
    while let Some(r) = clients.join_next().await {
        seen.push(r??);
    }
    let pod = pods(ns, "llm")
        .await?
        .first()
        .and_then(|p| p.metadata.name.clone());
    let pod = pod.context("the woken pod")?;
    for (stream, s) in &seen {
        assert_eq!(s.status, 200, "{s:?}");
        // Nothing before the engine loaded: the head of every answer (streams included)
        // comes after the 5 s of loading.
        assert!(s.head >= LOADING, "answered before the model loaded: {s:?}");
        if *stream {
            assert!(s.body.trim_end().ends_with("data: [DONE]"), "{s:?}");
        } else {
            assert!(s.body.contains("\"finish_reason\""), "{s:?}");
        }
    }
    assert_eq!(seen.iter().filter(|(stream, _)| *stream).count(), 10);
    assert_eq!(
        env.node.requests_while_loading(ns.name(), &pod),
        Some(0),
        "a request reached the engine before it was ready"
    );
    assert_eq!(replicas(ns, "llm").await?, 1);
    assert_eq!(router_metric(&router, held, &[]).await?, 0.0);
    assert_eq!(
        router_metric(&router, released, &[&model_label, outcome]).await? - released_before,
        20.0
    );
    assert_eq!(
        router_metric(&router, waits, &[&model_label]).await? - waits_before,
        20.0
    );
    // Idle again: back to 0.
    until_replicas(ns, "llm", 0, IDLE + WAIT).await?;
    router.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn held_requests_get_503_with_retry_after_when_the_engine_never_loads() -> Result<()> {
    let env = super::setup("as-never").await?;
    let ns = &env.ns;
    create_serving(ns, "llm", 0, Duration::from_secs(3600)).await?;
    let router = router(ns, "llm", "3s").await?;
    create_policy(ns, "llm").await?;
    let model = routed_model(ns);
    until_known(&router, &model, "llm").await?;
    let start = Instant::now();
    let mut clients = burst(&router.addr.to_string(), &model, 6, start);
    let mut seen = Vec::new();
    while let Some(r) = clients.join_next().await {
        seen.push(r??.1);
    }
    for s in &seen {
        assert_eq!(s.status, 503, "{s:?}");
        assert_eq!(s.retry_after.as_deref(), Some("7"), "{s:?}");
        let body: serde_json::Value = serde_json::from_str(&s.body)?;
        assert_eq!(body["error"]["code"], "cold_start_timeout", "{s:?}");
        assert!(s.end >= Duration::from_secs(3), "before the timeout: {s:?}");
        assert!(
            s.end < Duration::from_secs(5),
            "long after the timeout: {s:?}"
        );
    }
    // The demand woke the target (its pod never loads); nothing is left held or in flight.
    assert_eq!(replicas(ns, "llm").await?, 1);
    let model_label = format!("model=\"{model}\"");
    for family in [
        "kthena_router_cold_start_held_requests",
        "kthena_router_active_downstream_requests",
        "kthena_router_active_upstream_requests",
    ] {
        assert_eq!(router_metric(&router, family, &[]).await?, 0.0, "{family}");
    }
    let timeouts = "kthena_router_cold_start_requests_total";
    let outcome = "outcome=\"timeout\"";
    assert_eq!(
        router_metric(&router, timeouts, &[&model_label, outcome]).await?,
        6.0
    );
    router.shutdown().await;
    Ok(())
}
