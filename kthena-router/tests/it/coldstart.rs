//! Scale from zero in standalone mode: a ModelServer without endpoints holds its requests
//! (`coldStart:`); an endpoint added to the config file on hot reload releases them in
//! arrival order; past `coldStart.holdTimeout` they get 503 `cold_start_timeout` with
//! `Retry-After`; a full hold refuses at once; a client that leaves is dropped from it.
#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::time::Duration;

use tokio::time::Instant;

use http::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::*;
use crate::faults_support::{last_log_line, read_stream, wait_metric};
use crate::pd_support::Tap;

const HELD: &str = r#"kthena_router_cold_start_held_requests{model="m",model_server="default/ms"}"#;
const IDLE: &str = r#"kthena_router_model_server_idle_seconds{model_server="default/ms"}"#;
const ACTIVE: &str = r#"kthena_router_active_downstream_requests{model="m"}"#;

fn outcome(o: &str) -> String {
    format!(r#"kthena_router_cold_start_requests_total{{model="m",outcome="{o}"}}"#)
}

/// A router with route `m` → ModelServer `default/ms` (pods `app: demo`) and no endpoint.
async fn cold_router(cold_start: &str) -> TestRouter {
    let r = TestRouter::start(
        &format!("metricsScrapeInterval: 100ms\ncoldStart: {cold_start}"),
        "    []\n",
        &[
            ("ms.yaml", model_server("ms", "m", "demo", "")),
            ("route.yaml", simple_route("route", "m", "ms")),
        ],
    )
    .await;
    r.wait_ready().await;
    r
}

/// Adds the endpoint `addr` (`app: demo`) to the config file; waits for the reload.
async fn add_endpoint(r: &TestRouter, addr: std::net::SocketAddr) {
    let path = r.dir.path().join("router.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace("    []\n", &endpoint("sim-0", addr, "demo"));
    let generation = r.router.generation();
    std::fs::write(&path, text).unwrap();
    for _ in 0..250 {
        if r.router.generation() > generation {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the config was not reloaded");
}

/// Writes `text` as the route manifest; waits for the reload.
async fn reload_route(r: &TestRouter, text: &str) {
    let generation = r.router.generation();
    std::fs::write(r.dir.path().join("manifests/route.yaml"), text).unwrap();
    for _ in 0..250 {
        if r.router.generation() > generation {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the manifests were not reloaded");
}

/// `(status, Retry-After, body)` of a chat completion for `m` (streamed when `stream`).
async fn request(url: String, stream: bool) -> (StatusCode, Option<String>, String) {
    let resp = post_stream(&url, chat("m", "hello", stream, 4), &[]).await;
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let (text, _) = read_stream(resp.into_body()).await;
    (status, retry, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_go_on_when_an_endpoint_appears_on_reload() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let tap = Tap::start("127.0.0.1:0".parse().unwrap(), sim.addr(), None).await;
    let r = cold_router("{holdTimeout: 60s}").await;
    let url = format!("{}/v1/chat/completions", r.url());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        tasks.spawn(request(url.clone(), i % 2 == 0));
    }
    wait_metric(&r, HELD, 20.0).await;
    assert_eq!(r.metric(IDLE).await, 0.0, "held requests count as active");
    assert_eq!(r.metric(ACTIVE).await, 20.0);
    assert!(tap.seen().is_empty(), "nothing goes upstream while held");

    add_endpoint(&r, tap.addr).await;
    let mut streams = 0;
    while let Some(res) = tasks.join_next().await {
        let (status, _, text) = res.unwrap();
        assert_eq!(status, StatusCode::OK, "{text}");
        if text.starts_with("data:") {
            streams += 1;
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        }
    }
    assert_eq!(streams, 10);
    assert_eq!(tap.seen().len(), 20);
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_eq!(r.metric(&outcome("released")).await, 20.0);
    let count = r#"kthena_router_cold_start_wait_seconds_count{model="m"}"#;
    assert_eq!(r.metric(count).await, 20.0);
    wait_metric(&r, ACTIVE, 0.0).await;
    for _ in 0..250 {
        if r.metric(IDLE).await > 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("idle seconds stay 0 after the last request ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_held_past_the_timeout_get_503_with_retry_after() {
    let r = cold_router("{holdTimeout: 2s, retryAfter: 7s}").await;
    let url = format!("{}/v1/chat/completions", r.url());
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..5 {
        let url = url.clone();
        tasks.spawn(async move { (request(url, i % 2 == 0).await, start.elapsed()) });
    }
    while let Some(res) = tasks.join_next().await {
        let ((status, retry, text), took) = res.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
        assert_eq!(retry.as_deref(), Some("7"));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], "cold_start_timeout", "{v}");
        assert_eq!(v["error"]["type"], "service_unavailable_error", "{v}");
        assert_eq!(
            v["error"]["message"],
            "model server default/ms has no ready endpoint: the request was held 2s waiting for one to start; retry after 7s"
        );
        assert!(
            took > Duration::from_secs(2) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_eq!(r.metric(&outcome("timeout")).await, 5.0);
    wait_metric(&r, ACTIVE, 0.0).await;
    wait_metric(&r, "kthena_router_active_requests", 0.0).await;
    let line = last_log_line(&r, 5).await;
    assert_eq!(line["status_code"], 503, "{line}");
    assert_eq!(line["error"]["type"], "cold_start_timeout", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_held_is_dropped_and_counted() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let tap = Tap::start("127.0.0.1:0".parse().unwrap(), sim.addr(), None).await;
    let r = cold_router("{holdTimeout: 60s}").await;
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    let body = chat("m", "leaving", false, 4);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: leaving\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    wait_metric(&r, HELD, 1.0).await;
    drop(s);
    wait_metric(&r, &outcome("client_disconnected"), 1.0).await;
    assert_eq!(r.metric(HELD).await, 0.0);
    wait_metric(&r, ACTIVE, 0.0).await;
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["request_id"], "leaving", "{line}");
    assert_eq!(line["status_code"], 503, "{line}");
    assert_eq!(line["error"]["type"], "client_disconnect", "{line}");

    add_endpoint(&r, tap.addr).await;
    let (status, _, text) = request(format!("{}/v1/chat/completions", r.url()), false).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let seen = tap.seen();
    assert_eq!(
        seen.len(),
        1,
        "the request that left never reaches the engine"
    );
    assert!(!String::from_utf8_lossy(&seen[0].body).contains("leaving"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_hold_refuses_at_once() {
    let r = cold_router("{maxHeldRequests: 2}").await;
    let url = format!("{}/v1/chat/completions", r.url());
    let mut held = tokio::task::JoinSet::new();
    for _ in 0..2 {
        held.spawn(request(url.clone(), false));
    }
    wait_metric(&r, HELD, 2.0).await;
    let start = Instant::now();
    let (status, retry, text) = request(url, false).await;
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry.as_deref(), Some("10"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "cold_start_queue_full", "{v}");
    assert_eq!(
        v["error"]["message"],
        "model server default/ms has no ready endpoint and 2 requests are already held for it; retry after 10s"
    );
    assert_eq!(r.metric(&outcome("rejected")).await, 1.0);
    assert_eq!(r.metric(HELD).await, 2.0);
    held.abort_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cold_start_off_the_answer_is_503_at_once() {
    let r = cold_router("{enabled: false}").await;
    let (status, retry, text) = request(format!("{}/v1/chat/completions", r.url()), false).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry, None);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "no_ready_endpoint", "{v}");
    assert_eq!(r.metric(&outcome("rejected")).await, 0.0);
}

/// A request held when the router begins to shut down is answered at once, 503
/// `cold_start_shutting_down` with `Retry-After` (nothing can release it while the router
/// drains; its client retries another replica), logged as the router's doing, and the drain
/// does not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_at_shutdown_is_answered_at_once() {
    let r = TestRouter::start(
        "drainTimeout: 60s\ncoldStart: {holdTimeout: 60s, retryAfter: 4s}",
        "    []\n",
        &[
            ("ms.yaml", model_server("ms", "m", "demo", "")),
            ("route.yaml", simple_route("route", "m", "ms")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    let mut answer = tokio::task::JoinSet::new();
    answer.spawn(request(url, false));
    wait_metric(&r, HELD, 1.0).await;
    let TestRouter { dir, router } = r;
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), router.shutdown())
        .await
        .expect("the drain waited for the held request");
    let (status, retry, text) = answer.join_next().await.unwrap().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert_eq!(retry.as_deref(), Some("4"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "cold_start_shutting_down", "{v}");
    assert_eq!(
        v["error"]["message"],
        "model server default/ms has no ready endpoint and this router is shutting down; retry after 4s"
    );
    let log = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let line: serde_json::Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(line["status_code"], 503, "{line}");
    assert_eq!(line["error"]["type"], "cold_start_shutting_down", "{line}");
    assert_eq!(line["error_origin"], "internal", "{line}");
}

/// A held request follows its route: pointed at a ModelServer with an endpoint, it goes
/// there at once; a request held when its ModelRoute is removed gets the 404 a new request
/// gets, at once (not at the hold timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_follows_its_route() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms\ncoldStart: {holdTimeout: 60s}",
        &endpoint("warm-0", sim.addr(), "warm"),
        &[
            ("ms.yaml", model_server("ms", "m", "demo", "")),
            ("ms2.yaml", model_server("ms2", "m", "warm", "")),
            ("route.yaml", simple_route("route", "m", "ms")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    let mut held = tokio::task::JoinSet::new();
    held.spawn(request(url.clone(), true));
    wait_metric(&r, HELD, 1.0).await;
    let start = Instant::now();
    reload_route(&r, &simple_route("route", "m", "ms2")).await;
    let (status, _, text) = held.join_next().await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_eq!(r.metric(&outcome("released")).await, 1.0);

    reload_route(&r, &simple_route("route", "m", "ms")).await;
    held.spawn(request(url.clone(), false));
    wait_metric(&r, HELD, 1.0).await;
    let start = Instant::now();
    let gone = r.dir.path().join("manifests/route.yaml");
    let generation = r.router.generation();
    std::fs::remove_file(&gone).unwrap();
    let (status, _, text) = held.join_next().await.unwrap().unwrap();
    assert!(r.router.generation() > generation);
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_eq!(r.metric(&outcome("released")).await, 2.0);
}

/// A held request for a LoRA adapter goes on once the woken engine has reported its
/// adapters (its first `/v1/models` scrape), not with 503 `lora_adapter_not_loaded` the
/// moment the endpoint appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lora_request_waits_for_the_adapters_of_the_woken_engine() {
    let mut cfg = sim_config("m");
    cfg.lora_modules = vec!["lora1".to_owned()];
    let sim = kthena_sim::spawn(cfg).await.unwrap();
    // A long scrape interval: the endpoint appears well before its adapters are known.
    let r = TestRouter::start(
        "metricsScrapeInterval: 2s\ncoldStart: {holdTimeout: 60s}",
        "    []\n",
        &[
            ("ms.yaml", model_server("ms", "m", "demo", "")),
            (
                "route.yaml",
                simple_route("route", "m", "ms") + "  loraAdapters: [lora1]\n",
            ),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    let mut held = tokio::task::JoinSet::new();
    for i in 0..3 {
        let url = url.clone();
        held.spawn(async move {
            let resp = post_stream(&url, chat("lora1", "hello", i == 0, 4), &[]).await;
            let status = resp.status();
            (status, read_stream(resp.into_body()).await.0)
        });
    }
    let held_lora =
        r#"kthena_router_cold_start_held_requests{model="lora1",model_server="default/ms"}"#;
    wait_metric(&r, held_lora, 3.0).await;
    add_endpoint(&r, sim.addr()).await;
    while let Some(res) = held.join_next().await {
        let (status, text) = res.unwrap();
        assert_eq!(status, StatusCode::OK, "{text}");
    }
    assert_eq!(r.metric(held_lora).await, 0.0);
}
