//! Router integration tests over real sockets: the router in front of kthena-sim engines and
//! scripted upstreams on 127.0.0.1 (and ::1).

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::time::Instant;

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

/// Completes a chat through the router: model rewritten, usage counted, access log written,
/// `requests_total` +1 exactly, `x-request-id` echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_round_trip_metrics_and_access_log() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let series = r#"kthena_router_requests_total{model="public",path="/v1/chat/completions",status_code="200",error_type="successful_request",model_route="default/route",backend_type="model_server",backend_name="default/srv",upstream_model="real-model"}"#;
    let before = r.metric(series).await;
    let (status, headers, body) = post(
        &format!("{}/v1/chat/completions", r.url()),
        chat("public", "hello there", false, 5),
        &[("x-request-id", "req-1")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["x-request-id"], "req-1");
    let v = json(&body);
    assert_eq!(v["model"], "real-model");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(r.metric(series).await, before + 1.0);
    let log = r.access_log();
    let last = log.last().unwrap();
    assert_eq!(last["status_code"], 200);
    assert_eq!(last["model_name"], "public");
    assert_eq!(last["model_route"], "default/route");
    assert_eq!(last["model_server"], "default/srv");
    assert_eq!(last["selected_pod"], "sim-a");
    assert_eq!(last["request_id"], "req-1");
    assert_eq!(last["upstream_model"], "real-model");
    assert_eq!(last["upstream_attempts"], 1);
    assert_eq!(last["output_tokens"], 5);
    assert_eq!(last["input_tokens"], 10); // ceil(39 chars of "<|im_start|>user\nhello there<|im_end|>\n" / 4)

    // GET /v1/models lists route names.
    let (status, text) = get(&format!("{}/v1/models", r.url())).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["data"][0]["id"], "public");
    assert_eq!(v["data"][0]["owned_by"], "kthena");

    // The debug listener dumps routes and pods with scraped models.
    let (status, text) = get(&format!(
        "http://{}/debug/config_dump/pods",
        r.router.debug_addr
    ))
    .await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pods"][0]["name"], "sim-a");
    assert_eq!(v["pods"][0]["models"][0], "real-model");
    let (status, text) = get(&format!(
        "http://{}/debug/config_dump/namespaces/default/modelroutes/nope",
        r.router.debug_addr
    ))
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(text, r#"{"error":"ModelRoute not found"}"#);
    r.router.shutdown().await;
}

/// Streaming: the first chunk reaches the client long before the engine has finished, the
/// usage chunk the router asked for is hidden, and the stream ends with `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_first_byte_before_upstream_finishes() {
    // Real time: about 5 ms per decode step, so 60 tokens take ~300 ms upstream.
    let sim = kthena_sim::spawn(sim_config("m").with_time_scale(1.0))
        .await
        .unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let start = Instant::now();
    let resp = post_stream(
        &format!("{}/v1/chat/completions", r.url()),
        chat("m", "hi", true, 60),
        &[],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("content-length").is_none());
    let mut body = resp.into_body();
    let mut first_at = None;
    let mut all = Vec::new();
    let mut frames = 0;
    while let Some(f) = body.frame().await {
        let f = f.unwrap();
        if let Ok(d) = f.into_data() {
            first_at.get_or_insert_with(Instant::now);
            frames += 1;
            all.extend_from_slice(&d);
        }
    }
    let done_at = Instant::now();
    let first = first_at.unwrap() - start;
    let total = done_at - start;
    assert!(frames > 10, "{frames} frames");
    assert!(first * 3 < total, "first byte after {first:?} of {total:?}");
    let text = String::from_utf8(all).unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // The client did not ask for usage: no usage-only chunk reaches it.
    assert!(!text.contains(r#""choices":[]"#), "{text}");
    // ... but the router read it.
    for _ in 0..50 {
        if r.access_log()
            .last()
            .is_some_and(|l| l["output_tokens"] == 60)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(r.access_log().last().unwrap()["output_tokens"], 60);
    r.router.shutdown().await;
}

/// Weighted targets split 70/30 within ±5% over 1000 requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_targets_split_70_30() {
    let v1 = kthena_sim::spawn(sim_config("ds-v1").with_time_scale(1000.0))
        .await
        .unwrap();
    let v2 = kthena_sim::spawn(sim_config("ds-v2").with_time_scale(1000.0))
        .await
        .unwrap();
    let route = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: subset, namespace: default}
spec:
  modelName: ds
  rules:
  - targetModels:
    - {modelServerName: v1, weight: 70}
    - {modelServerName: v2, weight: 30}
";
    let eps = format!(
        "{}{}",
        endpoint("sim-v1", v1.addr(), "v1"),
        endpoint("sim-v2", v2.addr(), "v2")
    );
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &eps,
        &[
            ("s1.yaml", model_server("v1", "ds-v1", "v1", "")),
            ("s2.yaml", model_server("v2", "ds-v2", "v2", "")),
            ("r.yaml", route.to_owned()),
        ],
    )
    .await;
    let url = format!("{}/v1/completions", r.url());
    let body = r#"{"model":"ds","prompt":"x","max_tokens":1}"#;
    let counts = futures_util::future::join_all((0..8).map(|_| {
        let url = url.clone();
        async move {
            let mut v1 = 0;
            for _ in 0..125 {
                let (status, _, b) = post(&url, body, &[]).await;
                assert_eq!(status, StatusCode::OK);
                if json(&b)["model"] == "ds-v1" {
                    v1 += 1;
                }
            }
            v1
        }
    }))
    .await;
    let v1_share: i32 = counts.iter().sum();
    assert!((650..=750).contains(&v1_share), "v1 got {v1_share} of 1000");
    r.router.shutdown().await;
}

const MULTI: &str = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: multi, namespace: default}
spec:
  modelName: deepseek
  rules:
  - name: premium
    modelMatch:
      headers:
        user-type: {exact: premium}
    targetModels: [{modelServerName: big}]
  - name: default
    targetModels: [{modelServerName: small}]
";

/// Header rules pick the right server; duplicate routes resolve to the oldest; hot reload
/// swaps routes and rejects a broken file while the old snapshot keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_rules_oldest_route_and_hot_reload() {
    let big = kthena_sim::spawn(sim_config("ds-7b")).await.unwrap();
    let small = kthena_sim::spawn(sim_config("ds-1.5b")).await.unwrap();
    // Two routes for the same model: the older one (creationTimestamp) wins even though
    // its file sorts last.
    let dup_old = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: z-old, namespace: default, creationTimestamp: \"2025-01-01T00:00:00Z\"}
spec:
  modelName: dup
  rules:
  - targetModels: [{modelServerName: small}]
";
    let dup_new = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: a-new, namespace: default, creationTimestamp: \"2026-01-01T00:00:00Z\"}
spec:
  modelName: dup
  rules:
  - targetModels: [{modelServerName: big}]
";
    let eps = format!(
        "{}{}",
        endpoint("big-0", big.addr(), "big"),
        endpoint("small-0", small.addr(), "small")
    );
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &eps,
        &[
            (
                "servers.yaml",
                format!(
                    "{}---\n{}",
                    model_server("big", "ds-7b", "big", ""),
                    model_server("small", "ds-1.5b", "small", "")
                ),
            ),
            ("multi.yaml", MULTI.to_owned()),
            ("z-dup-old.yaml", dup_old.to_owned()),
            ("a-dup-new.yaml", dup_new.to_owned()),
        ],
    )
    .await;
    let url = format!("{}/v1/chat/completions", r.url());
    let model_of = |b: &Bytes| json(b)["model"].as_str().unwrap().to_owned();
    let (_, _, b) = post(
        &url,
        chat("deepseek", "q", false, 1),
        &[("user-type", "premium")],
    )
    .await;
    assert_eq!(model_of(&b), "ds-7b");
    for h in [
        &[("user-type", "basic")][..],
        &[("user-type", "")][..],
        &[][..],
    ] {
        let (_, _, b) = post(&url, chat("deepseek", "q", false, 1), h).await;
        assert_eq!(model_of(&b), "ds-1.5b", "headers {h:?}");
    }
    let (_, _, b) = post(&url, chat("dup", "q", false, 1), &[]).await;
    assert_eq!(model_of(&b), "ds-1.5b");

    // Hot reload: remove the oldest duplicate; the newer route takes over.
    let generation = r.router.generation();
    std::fs::remove_file(r.manifests().join("z-dup-old.yaml")).unwrap();
    wait_generation(&r, generation + 1).await;
    let (_, _, b) = post(&url, chat("dup", "q", false, 1), &[]).await;
    assert_eq!(model_of(&b), "ds-7b");

    // A broken file is rejected: generation unchanged, old routes keep serving.
    let generation = r.router.generation();
    let failures = r#"kthena_router_config_reloads_total{result="failure"}"#;
    std::fs::write(r.manifests().join("broken.yaml"), "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelRoute\nmetadata: {name: b}\nspec:\n  modelName: x\n  rules: [{targetModels: [{modelServerName: s, weight: 500}]}]\n").unwrap();
    for _ in 0..100 {
        if r.metric(failures).await >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(r.metric(failures).await, 1.0);
    assert_eq!(r.router.generation(), generation);
    let (status, _, b) = post(
        &url,
        chat("deepseek", "q", false, 1),
        &[("user-type", "premium")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(model_of(&b), "ds-7b");
    r.router.shutdown().await;
}

async fn wait_generation(r: &TestRouter, generation: u64) {
    for _ in 0..200 {
        if r.router.generation() >= generation {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no reload to generation {generation}");
}

/// A refused endpoint and a 503 answer are retried on the next ranked endpoint with a
/// byte-identical body; an upstream 4xx reaches the client unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_with_identical_body_and_passes_4xx() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let flaky = Upstream::start(Script::Status(503, r#"{"error":"overloaded"}"#)).await;
    let good = Upstream::start(Script::Status(200, r#"{"ok":true}"#)).await;
    let eps = format!(
        "{}{}{}",
        endpoint("a0-dead", dead_addr, "x"),
        endpoint("a1-flaky", flaky.addr, "x"),
        endpoint("b-good", good.addr, "x")
    );
    let r = TestRouter::start(
        &format!("metricsScrapeInterval: 1h\n{LEAST_REQUEST_ONLY}"),
        &eps,
        &[
            ("s.yaml", model_server("srv", "upstream-name", "x", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let sent = r#"{"model":"m","prompt":"same bytes","max_tokens":3,"temperature":0.5}"#;
    let (status, _, body) = post(&format!("{}/v1/completions", r.url()), sent, &[]).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(&body[..], br#"{"ok":true}"#);
    let b1 = flaky.bodies.lock().unwrap().clone();
    let b2 = good.bodies.lock().unwrap().clone();
    assert_eq!(b1.len(), 1);
    assert_eq!(b2.len(), 1);
    assert_eq!(b1[0], b2[0], "retry body differs");
    // Only `model` is rewritten; every other member keeps the client's order and bytes.
    let expected =
        r#"{"model":"upstream-name","prompt":"same bytes","max_tokens":3,"temperature":0.5}"#;
    assert_eq!(&b2[0][..], expected.as_bytes());
    let log = r.access_log();
    let last = log.last().unwrap();
    assert_eq!(last["upstream_attempts"], 3);
    assert_eq!(last["selected_pod"], "b-good");
    r.router.shutdown().await;

    // Upstream 4xx is passed through unchanged, never retried.
    let bad = Upstream::start(Script::Status(
        400,
        r#"{"error":{"message":"context length exceeded","code":400}}"#,
    ))
    .await;
    let other = Upstream::start(Script::Status(200, r#"{"ok":true}"#)).await;
    let eps = format!(
        "{}{}",
        endpoint("a-bad", bad.addr, "x"),
        endpoint("b-other", other.addr, "x")
    );
    let r = TestRouter::start(
        &format!("metricsScrapeInterval: 1h\n{LEAST_REQUEST_ONLY}"),
        &eps,
        &[
            ("s.yaml", model_server("srv", "u", "x", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let (status, _, body) = post(&format!("{}/v1/completions", r.url()), sent, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        &body[..],
        br#"{"error":{"message":"context length exceeded","code":400}}"#
    );
    assert!(other.bodies.lock().unwrap().is_empty());
    let log = r.access_log();
    assert_eq!(log.last().unwrap()["error"]["type"], "upstream_response");
    assert_eq!(log.last().unwrap()["upstream_status_code"], 400);

    // The Responses API path is proxied the same way (`input` as the prompt). Both endpoints
    // are idle again, so the tie goes to the other one this time (ties take turns).
    let (status, _, body) = post(
        &format!("{}/v1/responses", r.url()),
        r#"{"model":"m","input":"hi","instructions":"be brief"}"#,
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let sent = other.bodies.lock().unwrap().last().cloned().unwrap();
    assert_eq!(json(&sent)["model"], "u");
    assert_eq!(json(&sent)["instructions"], "be brief");
    r.router.shutdown().await;
}

/// An engine killed mid-stream ends the client stream with an error, never `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_upstream_mid_stream_errors_the_client_stream() {
    let faults = kthena_sim::Faults {
        drop_after_chunks: Some(3),
        ..kthena_sim::Faults::default()
    };
    let sim = kthena_sim::spawn(sim_config("m").with_faults(faults))
        .await
        .unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let resp = post_stream(
        &format!("{}/v1/chat/completions", r.url()),
        chat("m", "hi", true, 50),
        &[],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut text = String::new();
    let mut errored = false;
    while let Some(f) = body.frame().await {
        match f {
            Ok(f) => {
                if let Ok(d) = f.into_data() {
                    text.push_str(&String::from_utf8_lossy(&d));
                }
            }
            Err(_) => {
                errored = true;
                break;
            }
        }
    }
    assert!(errored, "the client stream ended cleanly: {text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert!(text.contains("upstream_stream_error"), "{text}");
    for _ in 0..50 {
        if r.access_log()
            .last()
            .is_some_and(|l| l["error"]["type"] == "upstream_transport")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let log = r.access_log();
    assert_eq!(log.last().unwrap()["error"]["type"], "upstream_transport");
    assert_eq!(log.last().unwrap()["error_origin"], "upstream");
    r.router.shutdown().await;
}

/// A client disconnect cancels the upstream request at once and frees the in-flight count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_upstream_and_in_flight() {
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel();
    let up = Upstream::start(Script::EndlessStream {
        every: Duration::from_millis(20),
        closed: closed_tx,
    })
    .await;
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("slow", up.addr, "x"),
        &[
            ("s.yaml", model_server("srv", "u", "x", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let resp = post_stream(
        &format!("{}/v1/completions", r.url()),
        r#"{"model":"m","prompt":"p","stream":true}"#,
        &[],
    )
    .await;
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"data: "));
    let snap = r.router.snapshot();
    assert_eq!(snap.endpoints[0].in_flight(), 1);
    let gauge = r#"kthena_router_active_upstream_requests{model_server="default/srv",model_route="default/route",backend_type="model_server",backend_name="default/srv",upstream_model="u"}"#;
    assert_eq!(r.metric(gauge).await, 1.0);
    drop(body);
    tokio::time::timeout(Duration::from_secs(2), closed_rx.recv())
        .await
        .expect("upstream never saw the disconnect");
    assert_eq!(snap.endpoints[0].in_flight(), 0);
    assert_eq!(r.metric(gauge).await, 0.0);
    let log = r.access_log();
    assert_eq!(log.last().unwrap()["error"]["type"], "client_disconnect");
    r.router.shutdown().await;
}

/// An engine on an IPv6 address works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_endpoint() {
    let mut cfg = sim_config("v6-model");
    cfg.host = "::1".parse().unwrap();
    let sim = kthena_sim::spawn(cfg).await.unwrap();
    assert!(sim.addr().is_ipv6());
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms",
        &endpoint("v6", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "v6-model", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let (status, _, body) = post(
        &format!("{}/v1/chat/completions", r.url()),
        chat("m", "hi", false, 2),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json(&body)["model"], "v6-model");
    let (_, text) = get(&format!(
        "http://{}/debug/config_dump/pods",
        r.router.debug_addr
    ))
    .await;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["pods"][0]["models"][0], "v6-model");
    r.router.shutdown().await;
}

/// Every error case answers with its status and the OpenAI error shape, and the unknown
/// model moves `requests_total{error_type="route_not_found",model="unknown"}` by exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_cases_status_and_shape() {
    let slow = kthena_sim::spawn(sim_config("m").with_faults(kthena_sim::Faults {
        first_byte_delay_ms: 2000,
        ..kthena_sim::Faults::default()
    }))
    .await
    .unwrap();
    let manifests = [
        (
            "s.yaml",
            model_server("srv", "m", "demo", "  trafficPolicy: {timeout: 200ms}\n"),
        ),
        ("empty.yaml", model_server("nobody", "m", "none", "")),
        ("r.yaml", simple_route("route", "m", "srv")),
        ("r2.yaml", simple_route("route2", "orphan", "nobody")),
        ("r3.yaml", simple_route("route3", "ghost", "missing")),
    ];
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h\nmaxBodyBytes: 1000\ncoldStart: {enabled: false}",
        &endpoint("slow", slow.addr(), "demo"),
        &manifests,
    )
    .await;
    let url = format!("{}/v1/chat/completions", r.url());
    let unknown = r#"kthena_router_requests_total{model="unknown",path="/v1/chat/completions",status_code="404",error_type="route_not_found",model_route="none",backend_type="unresolved",backend_name="none",upstream_model="none"}"#;
    assert_eq!(r.metric(unknown).await, 0.0);
    let big = format!(r#"{{"model":"m","prompt":"{}"}}"#, "x".repeat(2000));
    let cases: Vec<(String, u16, &str)> = vec![
        ("{not json".into(), 400, "invalid_json"),
        (r#"{"prompt":"x"}"#.into(), 400, "missing_model"),
        (r#"{"model":"m"}"#.into(), 400, "missing_prompt"),
        (chat("no-such-model", "x", false, 1), 404, "model_not_found"),
        (chat("ghost", "x", false, 1), 404, "model_server_not_found"),
        (big, 413, "request_too_large"),
        (chat("orphan", "x", false, 1), 503, "no_ready_endpoint"),
        (chat("m", "x", false, 1), 504, "upstream_timeout"),
    ];
    for (body, status, code) in cases {
        let (s, h, b) = post(&url, body.clone(), &[]).await;
        assert_eq!(
            s.as_u16(),
            status,
            "{body:.60}: {}",
            String::from_utf8_lossy(&b)
        );
        assert_eq!(h["content-type"], "application/json");
        let v = json(&b);
        let e = &v["error"];
        assert_eq!(e["code"], code, "{v}");
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(e["type"].is_string(), "{v}");
        assert!(e.as_object().unwrap().contains_key("param"), "{v}");
    }
    assert_eq!(r.metric(unknown).await, 1.0);
    // Any /v1/ path is parsed as an inference path (a body without a model is refused as
    // chat's is); vLLM's paths outside /v1/ are not routed.
    let (s, _, _) = post(&format!("{}/v1/embeddings", r.url()), "{}", &[]).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _, _) = post(&format!("{}/tokenize", r.url()), "{}", &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    r.router.shutdown().await;
}

/// The shipped standalone example loads: two ModelServers, two ModelRoutes, endpoints
/// selected by labels, the chart-default scheduler.
#[test]
fn example_standalone_config_loads() {
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/standalone/router.yaml"
    ));
    let cfg = kthena_router::load_config(
        path,
        &HashMap::<String, String>::new(),
        kthena_router::Overrides::default(),
    )
    .unwrap();
    assert_eq!(cfg.port, 8080);
    assert_eq!(cfg.endpoints().len(), 3);
    let snap = kthena_router::discovery::Loader::new()
        .load(&cfg, Some(path))
        .unwrap();
    assert_eq!(
        snap.routes.model_names(),
        vec![
            "deepseek-multi-models".to_owned(),
            "deepseek-simple".to_owned()
        ]
    );
    let small = &snap.servers["default/deepseek-r1-1-5b"];
    assert_eq!(small.endpoints.len(), 2);
    assert_eq!(
        small.model.as_deref(),
        Some("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    );
    assert_eq!(small.timeout, Some(Duration::from_secs(10)));
    assert_eq!(snap.servers["default/deepseek-r1-7b"].endpoints.len(), 1);
}

/// `trafficPolicy.retry` is honoured: `attempts` tries (cycling over the ranked endpoints)
/// with `retryInterval` between them; the last 5xx answer reaches the client unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_policy_retry_attempts_and_interval() {
    let flaky = Upstream::start(Script::Status(503, r#"{"error":"busy"}"#)).await;
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("only", flaky.addr, "x"),
        &[
            (
                "s.yaml",
                model_server(
                    "srv",
                    "u",
                    "x",
                    "  trafficPolicy:\n    retry: {attempts: 3, retryInterval: 60ms}\n",
                ),
            ),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let start = Instant::now();
    let (status, _, body) = post(
        &format!("{}/v1/completions", r.url()),
        r#"{"model":"m","prompt":"p"}"#,
        &[],
    )
    .await;
    let took = start.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(&body[..], br#"{"error":"busy"}"#);
    assert_eq!(flaky.bodies.lock().unwrap().len(), 3);
    assert!(took >= Duration::from_millis(120), "{took:?}");
    let log = r.access_log();
    assert_eq!(log.last().unwrap()["upstream_attempts"], 3);
    assert_eq!(log.last().unwrap()["error"]["type"], "upstream_response");
    r.router.shutdown().await;
}

/// Editing the config file itself (here: an endpoint's address) swaps the snapshot too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_reload_moves_an_endpoint() {
    let a = Upstream::start(Script::Status(200, r#"{"who":"a"}"#)).await;
    let b = Upstream::start(Script::Status(200, r#"{"who":"b"}"#)).await;
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("engine", a.addr, "x"),
        &[
            ("s.yaml", model_server("srv", "m", "x", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let url = format!("{}/v1/completions", r.url());
    let body = r#"{"model":"m","prompt":"p","max_tokens":1}"#;
    let (_, _, got) = post(&url, body, &[]).await;
    assert_eq!(json(&got)["who"], "a");
    let path = r.dir.path().join("router.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let generation = r.router.generation();
    std::fs::write(
        &path,
        text.replace(&a.addr.to_string(), &b.addr.to_string()),
    )
    .unwrap();
    wait_generation(&r, generation + 1).await;
    let (_, _, got) = post(&url, body, &[]).await;
    assert_eq!(json(&got)["who"], "b");
    r.router.shutdown().await;
}

/// Files beside the config file that are neither the config nor a manifest do not reload the
/// router; a manifest change still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrelated_files_beside_the_config_do_not_reload() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("e1", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let ok = r#"kthena_router_config_reloads_total{result="success"}"#;
    let before = r.metric(ok).await;
    std::fs::write(r.dir.path().join("notes.yaml"), "a: 1\n").unwrap();
    std::fs::write(r.dir.path().join("other.json"), "{}").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(r.metric(ok).await, before);
    // A manifest change is still seen.
    std::fs::write(
        r.manifests().join("r2.yaml"),
        simple_route("route2", "m2", "srv"),
    )
    .unwrap();
    for _ in 0..100 {
        if r.metric(ok).await > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(r.metric(ok).await, before + 1.0);
    r.router.shutdown().await;
}

/// A 405 names the allowed method in `Allow` (RFC 9110 §15.5.6: an origin server must send
/// it), on the inference paths and on the LoRA admin paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_not_allowed_sends_allow_header() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let r = TestRouter::start(
        "auth: {allowUnauthenticatedAdmin: true}",
        &endpoint("e", free, "a"),
        &[],
    )
    .await;
    for path in ["/v1/chat/completions", "/v1/load_lora_adapter"] {
        let resp = client()
            .request(
                http::Request::get(format!("{}{path}", r.url()))
                    .body(http_body_util::Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{path}");
        assert_eq!(resp.headers()["allow"], "POST", "{path}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "method_not_allowed", "{path}");
    }
    // The model list is GET only: other methods get 405 naming GET, not 404.
    let (status, headers, _) = post(&format!("{}/v1/models", r.url()), "{}", &[]).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers["allow"], "GET");
    r.router.shutdown().await;
}
