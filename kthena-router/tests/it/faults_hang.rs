//! Fault matrix: an engine that answers `200` with its headers and then sends nothing (a
//! hung engine). Nothing may hang for ever: after `upstreamIdleTimeout` a streaming client
//! gets an SSE error event and the end of its stream, a non-streaming client gets `504`
//! with an OpenAI-style body (no `200` head goes out before the engine's body begins), the
//! engine connection is closed, and the request counts as failed.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use crate::faults_support::*;
use http::StatusCode;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

/// The router's `upstreamIdleTimeout` in these tests.
const IDLE: Duration = Duration::from_millis(500);

/// The `kthena_router_requests_total` series of `/metrics` whose labels contain `label`.
async fn requests_total(r: &TestRouter, label: &str) -> Vec<String> {
    let (_, text) = get(&format!("http://{}/metrics", r.router.metrics_addr)).await;
    text.lines()
        .filter(|l| l.starts_with("kthena_router_requests_total{") && l.contains(label))
        .map(str::to_owned)
        .collect()
}

/// A streaming request: the SSE head arrives, then nothing. After the idle timeout the
/// client gets an `upstream_stream_error` event and a broken stream (never `[DONE]`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_hanging_after_its_sse_head_ends_the_stream_with_an_error_event() {
    let mut up = FaultUpstream::start(Fault::StallMidStream { events: 0 }).await;
    let r = fault_router("upstreamIdleTimeout: 500ms", up.addr, "").await;
    let t0 = Instant::now();
    let resp = post_stream(
        &format!("{}/v1/chat/completions", r.url()),
        chat("m", "hi", true, 4),
        &[],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let (text, errored) =
        tokio::time::timeout(Duration::from_secs(10), read_stream(resp.into_body()))
            .await
            .expect("the hung stream was never ended");
    let took = t0.elapsed();
    eprintln!("streaming client answered after {took:?} (upstreamIdleTimeout {IDLE:?})");
    assert!(took >= IDLE && took < IDLE * 4, "{took:?}");
    assert!(errored, "the client stream ended cleanly: {text}");
    assert!(text.contains("upstream_stream_error"), "{text}");
    assert!(text.contains("no data from the engine for 500ms"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    up.expect_disconnect().await;
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error"]["type"], "upstream_transport");
    let failed = requests_total(&r, "error_type=\"upstream_transport\"").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].ends_with(" 1"), "{failed:?}");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// An engine that answers every inference request with a `200` JSON head of
/// `content-length: 100` and no body; `/metrics` and `/v1/models` are answered normally.
/// Reports each inference connection the router closes.
async fn json_head_then_nothing() -> (
    std::net::SocketAddr,
    mpsc::UnboundedReceiver<()>,
    Arc<AtomicUsize>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let requests = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    let tasks = TaskTracker::new();
    let conns = tasks.clone();
    tasks.spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (tx, count) = (tx.clone(), Arc::clone(&count));
            conns.spawn(async move {
                let mut s = BufReader::new(s);
                while let Some(path) = read_request(&mut s).await {
                    if path == "/metrics" || path == "/v1/models" {
                        let body = if path == "/metrics" {
                            "vllm:num_requests_waiting 0\n"
                        } else {
                            r#"{"data":[{"id":"x"}]}"#
                        };
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.get_mut().write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
                    let _ = s.get_mut().write_all(head.as_bytes()).await;
                    let mut buf = [0u8; 256];
                    while !matches!(s.read(&mut buf).await, Ok(0) | Err(_)) {}
                    let _ = tx.send(());
                    return;
                }
            });
        }
    });
    (addr, rx, requests)
}

/// A non-streaming request: a `200` JSON head arrives, then nothing. After the idle timeout
/// the client gets `504 upstream_timeout` in OpenAI's error shape, not a `200` whose body
/// breaks; the engine connection is closed; the request counts as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_hanging_after_its_json_head_gets_the_client_a_504() {
    let (addr, mut closed, requests) = json_head_then_nothing().await;
    let r = fault_router("upstreamIdleTimeout: 500ms", addr, "").await;
    let t0 = Instant::now();
    let (status, _, body) = tokio::time::timeout(
        Duration::from_secs(10),
        post(
            &format!("{}/v1/chat/completions", r.url()),
            chat("m", "hi", false, 4),
            &[],
        ),
    )
    .await
    .expect("the router never answered");
    let took = t0.elapsed();
    eprintln!("non-streaming client answered after {took:?} (upstreamIdleTimeout {IDLE:?})");
    assert_openai_error(status, &body, 504, "timeout_error", "upstream_timeout");
    assert!(took >= IDLE && took < IDLE * 4, "{took:?}");
    tokio::time::timeout(Duration::from_secs(5), closed.recv())
        .await
        .expect("the router kept the hung engine connection open");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 504, "{line}");
    assert_eq!(line["error"]["type"], "upstream_transport", "{line}");
    let failed = requests_total(&r, "status_code=\"504\"").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].ends_with(" 1"), "{failed:?}");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}
