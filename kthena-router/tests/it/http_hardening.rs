//! HTTP hardening of the inference port over real sockets: every path that reads a body has
//! the same read timeouts (the LoRA admin paths too), the bytes of all buffered bodies share
//! one budget, the LoRA admin calls are off without authentication, HTTP/1.1 needs exactly
//! one `Host`, and routes to external providers do not count as models without endpoints.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::common::*;
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHAT: &str =
    r#"{"model":"public","messages":[{"role":"user","content":"hello"}],"max_tokens":3}"#;

/// Reads the whole answer until the router closes the connection (bounded).
async fn read_all(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(Err(e)) => panic!("read failed: {e}"),
        Err(_) => panic!("the router did not answer and close within 10s"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one answer head and its `Content-Length` body from a kept-open connection.
async fn read_answer(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= len {
                return text;
            }
        }
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .expect("no complete answer within 10s")
            .unwrap();
        assert!(n > 0, "closed before a complete answer: {text}");
        out.extend_from_slice(&buf[..n]);
    }
}

fn status_line(resp: &str) -> &str {
    resp.lines().next().unwrap_or_default()
}

fn body(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

fn header<'a>(resp: &'a str, name: &str) -> Option<&'a str> {
    let head = resp.split_once("\r\n\r\n").map_or(resp, |(h, _)| h);
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

async fn sim_router(head: &str) -> (kthena_sim::SimHandle, TestRouter) {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let r = TestRouter::start(
        head,
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    (sim, r)
}

/// Sends a request head declaring `declared` body bytes and the first `sent` of them.
async fn stalled(addr: SocketAddr, path: &str, declared: usize, sent: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nx-kthena-endpoint: sim-a\r\nContent-Length: {declared}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(sent).await.unwrap();
    s
}

/// The LoRA admin paths read their bodies under the same timeouts as the inference paths:
/// a body that stalls after one byte is answered 408 at `bodyReadIdleTimeout`, one that
/// trickles at `bodyReadTimeout`, instead of holding its connection for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_admin_bodies_time_out_like_inference_bodies() {
    let (_sim, r) = sim_router(
        "metricsScrapeInterval: 100ms\nauth: {allowUnauthenticatedAdmin: true}\nlistener: {bodyReadIdleTimeout: 500ms, bodyReadTimeout: 1500ms}",
    )
    .await;
    let addr = r.router.addr;
    for path in [
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        "/v1/chat/completions",
    ] {
        let start = Instant::now();
        let resp = read_all(stalled(addr, path, 100, b"{").await).await;
        let took = start.elapsed();
        assert_eq!(
            status_line(&resp),
            "HTTP/1.1 408 Request Timeout",
            "{path}: {resp}"
        );
        assert_eq!(header(&resp, "connection"), Some("close"), "{path}");
        assert_eq!(
            body(&resp),
            r#"{"error":{"message":"request body stalled: no data for 500ms","type":"invalid_request_error","param":null,"code":"request_timeout"}}"#,
            "{path}"
        );
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(3),
            "{path}: {took:?}"
        );
        eprintln!("{path}: stalled body answered 408 after {took:?} (bodyReadIdleTimeout 500ms)");
    }
    // A trickle (a byte every 200 ms) is cut at the total time.
    let mut s = stalled(addr, "/v1/unload_lora_adapter", 100, b"{").await;
    let start = Instant::now();
    let resp = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if s.write_all(b" ").await.is_err() || start.elapsed() > Duration::from_secs(5) {
            break read_all(s).await;
        }
        let mut peek = [0u8; 1];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(1), s.peek(&mut peek)).await
            && n > 0
        {
            break read_all(s).await;
        }
    };
    assert_eq!(status_line(&resp), "HTTP/1.1 408 Request Timeout", "{resp}");
    assert!(
        body(&resp).contains("request body not received within 1.5s"),
        "{resp}"
    );
    let m = r#"kthena_router_client_timeouts_total{listener="inference",phase="body"}"#;
    assert_eq!(r.metric(m).await, 4.0);
    r.router.shutdown().await;
}

const BUDGET_METRIC: &str = "kthena_router_buffered_request_body_bytes";

/// Waits (bounded) until the body budget in use is `want` bytes.
async fn until_buffered(r: &TestRouter, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = r.metric(BUDGET_METRIC).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{BUDGET_METRIC} stayed {now}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two clients that each send 1 MB of a declared 2 MB body and stall fill a 2 MB budget: a
/// third request is refused with 503 `request_buffer_full` and `Retry-After: 1` at once,
/// and once one stalled client left and the other timed out the budget is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_bodies_share_one_budget() {
    let (_sim, r) = sim_router(
        "metricsScrapeInterval: 100ms\nlistener: {maxBufferedBodyBytes: 2000000, bodyReadIdleTimeout: 1500ms}",
    )
    .await;
    let addr = r.router.addr;
    let half = vec![b' '; 1_000_000];
    let first = stalled(addr, "/v1/chat/completions", 2_000_000, &half).await;
    let second = stalled(addr, "/v1/chat/completions", 2_000_000, &half).await;
    until_buffered(&r, 2_000_000.0).await;

    let mut third = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    third.write_all(req.as_bytes()).await.unwrap();
    let resp = read_answer(&mut third).await;
    assert_eq!(
        status_line(&resp),
        "HTTP/1.1 503 Service Unavailable",
        "{resp}"
    );
    assert_eq!(header(&resp, "retry-after"), Some("1"));
    assert_eq!(header(&resp, "content-type"), Some("application/json"));
    assert_eq!(
        body(&resp),
        r#"{"error":{"message":"the router is holding too many request bodies (2000000 bytes); retry after 1s","type":"service_unavailable_error","param":null,"code":"request_buffer_full"}}"#
    );

    // One stalled client goes away: its bytes are released at once.
    let left = Instant::now();
    drop(first);
    until_buffered(&r, 1_000_000.0).await;
    eprintln!(
        "a stalled client's bytes released {:?} after it left",
        left.elapsed()
    );
    // The other is cut at the idle timeout.
    let resp = read_all(second).await;
    assert_eq!(status_line(&resp), "HTTP/1.1 408 Request Timeout", "{resp}");
    until_buffered(&r, 0.0).await;
    let (status, _, b) = post(&format!("{}/v1/chat/completions", r.url()), CHAT, &[]).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    until_buffered(&r, 0.0).await;
    let log = r.access_log();
    let full: Vec<_> = log.iter().filter(|e| e["status_code"] == 503).collect();
    assert_eq!(full.len(), 1, "{log:?}");
    assert_eq!(full[0]["error"]["type"], "overload");
    r.router.shutdown().await;
}

/// Regression: the budget counted a body's bytes, not its parsed tree, and a prompt of small
/// numbers parses to 32-64 bytes a value from 2 on the wire (four 10 MB bodies under a 50 MB
/// budget took the router past 1 GB). A large body's parsed cost is now reserved before it
/// is parsed: 1 MB of `0,` needs more than a 20 MB budget and is refused, while 78 kB of
/// prose is served and gives its bytes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parsed_size_of_a_body_counts_against_the_budget() {
    let (_sim, r) =
        sim_router("metricsScrapeInterval: 100ms\nlistener: {maxBufferedBodyBytes: 20000000}")
            .await;
    let url = format!("{}/v1/completions", r.url());
    let ids = vec!["0"; 500_000].join(",");
    let numbers = format!(r#"{{"model":"public","prompt":[{ids}],"max_tokens":1}}"#);
    let (status, headers, b) = post(&url, numbers, &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers.get("retry-after").unwrap(), "1");
    assert_eq!(
        String::from_utf8_lossy(&b),
        r#"{"error":{"message":"the router is holding too many request bodies (20000000 bytes); retry after 1s","type":"service_unavailable_error","param":null,"code":"request_buffer_full"}}"#
    );
    until_buffered(&r, 0.0).await;
    let prose = "hello world, ".repeat(6_000);
    let text = format!(r#"{{"model":"public","prompt":"{prose}","max_tokens":1}}"#);
    let (status, _, b) = post(&url, text, &[]).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    until_buffered(&r, 0.0).await;
    r.router.shutdown().await;
}

/// Without authentication the LoRA admin calls are refused on the inference port (403,
/// nothing reaches the engine) unless `auth.allowUnauthenticatedAdmin` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_admin_is_off_without_authentication() {
    let mut cfg = sim_config("real-model");
    cfg.lora_modules = vec!["sql-lora".to_owned()];
    let sim = kthena_sim::spawn(cfg).await.unwrap();
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
    let body = r#"{"lora_name":"sql-lora","lora_path":"/adapters/sql"}"#;
    for path in ["/v1/unload_lora_adapter", "/v1/load_lora_adapter"] {
        let url = format!("{}{path}", r.url());
        let (status, _, b) = post(&url, body, &[("x-kthena-endpoint", "sim-a")]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(
            String::from_utf8_lossy(&b),
            r#"{"error":{"message":"LoRA adapter administration is off on this port: turn on authentication (auth.jwksUri) and give callers the admin scope, or set auth.allowUnauthenticatedAdmin","type":"invalid_request_error","param":null,"code":"permission_denied"}}"#,
            "{path}"
        );
    }
    // The adapter is still loaded on the engine.
    let (_, models) = get(&format!("http://{}/v1/models", sim.addr())).await;
    assert!(models.contains("sql-lora"), "{models}");
    let log = r.access_log();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["status_code"], 403);
    assert_eq!(log[0]["error"]["type"], "authentication");
    r.router.shutdown().await;
}

/// RFC 9112 section 3.2: an HTTP/1.1 request without `Host`, with two, with a list in one
/// or with an invalid one is answered 400; HTTP/1.0 needs none but may not send two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_needs_exactly_one_host() {
    let (_sim, r) = sim_router("metricsScrapeInterval: 100ms").await;
    let addr = r.router.addr;
    let chat = |host: &str, version: &str| {
        format!(
            "POST /v1/chat/completions {version}\r\n{host}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{CHAT}",
            CHAT.len()
        )
    };
    let cases = [
        (
            chat("", "HTTP/1.1"),
            "missing (an HTTP/1.1 request needs one)",
        ),
        (chat("Host: a\r\nHost: b\r\n", "HTTP/1.1"), "more than one"),
        (chat("Host: a, b\r\n", "HTTP/1.1"), "more than one"),
        (chat("Host: a\r\nHost: b\r\n", "HTTP/1.0"), "more than one"),
        (chat("Host: a b\r\n", "HTTP/1.1"), "not a host[:port]"),
        (
            "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n".to_owned(),
            "missing (an HTTP/1.1 request needs one)",
        ),
    ];
    for (req, reason) in cases {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let resp = read_all(s).await;
        assert!(
            status_line(&resp).ends_with(" 400 Bad Request"),
            "{req}: {resp}"
        );
        assert_eq!(
            body(&resp),
            format!(
                r#"{{"error":{{"message":"invalid Host header: {reason}","type":"invalid_request_error","param":null,"code":"invalid_header"}}}}"#
            ),
            "{req}"
        );
    }
    for req in [
        chat("Host: router\r\n", "HTTP/1.1"),
        chat("Host: router.example:8080\r\n", "HTTP/1.1"),
        chat("", "HTTP/1.0"),
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let resp = read_all(s).await;
        assert!(status_line(&resp).ends_with(" 200 OK"), "{req}: {resp}");
    }
    r.router.shutdown().await;
}

/// A route whose only target is an ExternalModelProvider has no endpoint to be ready:
/// `/readyz` does not list it as a model without a ready endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_does_not_list_provider_routes() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let provider = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {name: oa, namespace: default}
spec:
  providerType: OpenAI
  baseURL: https://127.0.0.1:9/v1
"
    .to_owned();
    let route = "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: gpt, namespace: default}
spec:
  modelName: gpt
  rules:
  - targetModels: [{externalModelProviderName: oa}]
"
    .to_owned();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
            ("p.yaml", provider),
            ("g.yaml", route),
        ],
    )
    .await;
    r.wait_ready().await;
    let (status, text) = get(&format!("{}/readyz", r.url())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(text, r#"{"message":"router is ready"}"#);
    r.router.shutdown().await;
}
