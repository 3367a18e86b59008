//! Fault matrix, client side: clients that abort (before scheduling, while queued, during
//! prefill, mid-stream), a client that does not read (backpressure), and hostile bodies (at and over
//! the size limit, invalid UTF-8, deeply nested JSON). Each test checks what the client sees,
//! what the engine saw, and that the router's in-flight counters are back to zero.
//! The matrix is documented in docs/reliability.md.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::*;
use crate::faults_support::*;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn chat_url(r: &TestRouter) -> String {
    format!("{}/v1/chat/completions", r.url())
}

/// Reads from a raw connection until the router closes it (at most 5 s).
async fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The client sends half its body and closes: nothing reaches the engine, the access log
/// has one line for the abandoned request (499 `client_disconnect`, as for any client that
/// leaves before its answer), and every counter is back to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_aborts_before_scheduling() {
    let up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("", up.addr, "").await;
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":\"m\",",
    )
    .await
    .unwrap();
    s.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(s);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error_origin"], "downstream", "{line}");
    assert_eq!(line["error"]["type"], "client_disconnect", "{line}");
    assert_eq!(line["status_code"], 499, "{line}");
    assert_eq!(up.request_count(), 0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// The model's only fairness slot (`FAIRNESS_MAX_CONCURRENT=1`) is held by a request the
/// engine stalls; a second client sends its whole request and leaves while it waits in the
/// fairness queue. The queued request never reaches the engine; its access-log line is 503
/// `Client disconnected while waiting in queue` (Go Kthena's), `client_disconnect` from
/// downstream, with no selected pod. Once the first client leaves too, the departed entry is
/// skipped: the queue is empty, no slot is held, and every in-flight counter is zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_aborts_while_queued() {
    let mut up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router_with_env(
        up.addr,
        &[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("FAIRNESS_MAX_CONCURRENT", "1"),
        ],
    )
    .await;
    let url = chat_url(&r);
    let mut first = tokio::task::JoinSet::new();
    first.spawn(async move { post(&url, chat("m", "first", true, 4), &[]).await });
    for _ in 0..250 {
        if up.request_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(up.request_count(), 1);
    let size = r#"kthena_router_fairness_queue_size{model="m",user_id="_all"}"#;
    let slots = r#"kthena_router_fairness_queue_inflight{model="m"}"#;
    assert_eq!(r.metric(slots).await, 1.0);

    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    let body = chat("m", "queued", false, 4);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: queued\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    wait_metric(&r, size, 1.0).await;
    assert_eq!(r.router.snapshot().endpoints[0].in_flight(), 1);
    drop(s);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["request_id"], "queued", "{line}");
    assert_eq!(line["status_code"], 503, "{line}");
    assert_eq!(
        line["error"]["message"], "Client disconnected while waiting in queue",
        "{line}"
    );
    assert_eq!(line["error"]["type"], "client_disconnect", "{line}");
    assert_eq!(line["error_origin"], "downstream", "{line}");
    assert!(
        line["selected_pod"].as_str().unwrap_or("").is_empty(),
        "{line}"
    );

    first.abort_all();
    up.expect_disconnect().await;
    wait_metric(&r, size, 0.0).await;
    wait_metric(&r, slots, 0.0).await;
    assert_eq!(
        r.metric(r#"kthena_router_fairness_queue_cancelled_total{model="m",user_id=""}"#)
            .await,
        1.0
    );
    assert_eq!(
        up.request_count(),
        1,
        "the queued request reached the engine"
    );
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// The client leaves while the engine is still prefilling (no response header yet): the
/// router closes the engine connection and gives back `inFlight` and the prefill counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_aborts_during_prefill() {
    let mut up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("", up.addr, "").await;
    let url = chat_url(&r);
    let mut req = tokio::task::JoinSet::new();
    req.spawn(async move { post(&url, chat("m", "a long prompt", true, 4), &[]).await });
    for _ in 0..250 {
        if up.request_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(up.request_count(), 1);
    let (awaiting, pending) = r.prefill_counters().await["e"];
    assert_eq!(awaiting, 1);
    assert!(pending > 0, "{pending}");
    assert_eq!(r.router.snapshot().endpoints[0].in_flight(), 1);
    req.abort_all();
    up.expect_disconnect().await;
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 499);
    assert_eq!(line["error"]["type"], "client_disconnect");
    assert_eq!(line["error_origin"], "downstream");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// The client leaves after the first events: the engine connection is closed, the access
/// log says `client_disconnect` with the 200 already sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_aborts_mid_stream() {
    let mut up = FaultUpstream::start(Fault::StallMidStream { events: 2 }).await;
    let r = fault_router("", up.addr, "").await;
    let resp = post_stream(&chat_url(&r), chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut seen = Vec::new();
    while seen.windows(6).filter(|w| w == b"data: ").count() < 2 {
        let frame = body.frame().await.unwrap().unwrap().into_data().unwrap();
        seen.extend_from_slice(&frame);
    }
    assert!(seen.starts_with(b"data: "), "{seen:?}");
    drop(body);
    up.expect_disconnect().await;
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 200);
    assert_eq!(line["error"]["type"], "client_disconnect");
    // No usage chunk came: the two streamed events are counted (one token each), so a
    // client cannot stream for free by leaving before the end.
    assert_eq!(line["output_tokens"], 2);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// Resident set size of this process (the router runs in it), bytes.
fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    kb * 1024
}

/// The engine writes 50 MiB while the client reads nothing: the engine blocks after the
/// socket buffers fill (the router does not buffer the answer), and the router's memory
/// stays bounded; once the client reads, all of it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reading_client_backpressure() {
    // The resident set measured is this process's: no other test may run in it.
    if !in_own_process(module_path!(), "slow_reading_client_backpressure") {
        return;
    }
    const TOTAL: usize = 50 * 1024 * 1024;
    let up = FaultUpstream::start(Fault::Flood { bytes: TOTAL }).await;
    let r = fault_router("", up.addr, "").await;
    let rss_before = rss_bytes();
    let resp = post_stream(&chat_url(&r), chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // Wait until the engine cannot write any more (stable for 5 polls; bounded at 30 s).
    let (mut last, mut stable) = (usize::MAX, 0);
    for _ in 0..300 {
        let now = up.written.load(Ordering::SeqCst);
        stable = if now == last { stable + 1 } else { 0 };
        last = now;
        if stable == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(stable, 5, "the engine never blocked ({last} bytes written)");
    let rss_growth = rss_bytes().saturating_sub(rss_before);
    eprintln!(
        "engine blocked after {} KiB of {} KiB; RSS growth {} KiB",
        last / 1024,
        TOTAL / 1024,
        rss_growth / 1024
    );
    assert!(last < TOTAL / 2, "the router buffered {last} bytes");
    assert!(rss_growth < TOTAL / 2, "RSS grew by {rss_growth} bytes");
    let mut body = resp.into_body();
    let (mut got, mut tail) = (0usize, Vec::new());
    while let Some(f) = body.frame().await {
        let d = f.unwrap().into_data().unwrap();
        got += d.len();
        tail = d.to_vec();
    }
    assert!(got >= TOTAL, "{got}");
    assert!(tail.ends_with(b"data: [DONE]\n\n"));
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A completion body of exactly `len` bytes.
fn body_of_len(len: usize) -> String {
    let head = r#"{"model":"m","max_tokens":1,"prompt":""#;
    let pad = len - head.len() - 2;
    format!("{head}{}\"}}", "x".repeat(pad))
}

/// `maxBodyBytes: 2048`: a 2048-byte body is forwarded byte for byte; 2049 bytes (with a
/// `Content-Length`, or chunked) get 413 `request_too_large` and never reach the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_body_at_and_over_the_limit() {
    let up = Upstream::start(Script::Status(200, r#"{"choices":[]}"#)).await;
    let r = fault_router("maxBodyBytes: 2048", up.addr, "").await;
    let url = format!("{}/v1/completions", r.url());
    let at = body_of_len(2048);
    assert_eq!(at.len(), 2048);
    let (status, _, body) = post(&url, at.clone(), &[]).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(up.bodies.lock().unwrap().as_slice(), [at.as_bytes()]);
    let (status, _, body) = post(&url, body_of_len(2049), &[]).await;
    assert_openai_error(
        status,
        &body,
        413,
        "invalid_request_error",
        "request_too_large",
    );
    // The same body chunked, without a Content-Length.
    let over = body_of_len(2049);
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    let mut req = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    for part in over.as_bytes().chunks(1000) {
        req.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        req.extend_from_slice(part);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&req).await.unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(
        answer.contains("\"code\":\"request_too_large\""),
        "{answer}"
    );
    assert_eq!(up.bodies.lock().unwrap().len(), 1);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A body with invalid UTF-8 inside a JSON string: 400 `invalid_json`; nothing is sent on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_body_invalid_utf8() {
    let up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("", up.addr, "").await;
    let body: &[u8] = b"{\"model\":\"m\",\"prompt\":\"caf\xe9 \xff\xfe\"}";
    let (status, _, answer) = post(&chat_url(&r), body.to_vec(), &[]).await;
    assert_openai_error(
        status,
        &answer,
        400,
        "invalid_request_error",
        "invalid_json",
    );
    assert_eq!(up.request_count(), 0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// 100,000 nested `[` (alone, and as a field beside a valid model and prompt): 400
/// `invalid_json`, no stack overflow, nothing sent on; the router keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_body_deeply_nested_json() {
    let up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("", up.addr, "").await;
    let deep = "[".repeat(100_000);
    let closed = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let bodies = [
        deep.clone(),
        format!(r#"{{"model":"m","prompt":"p","x":{deep}"#),
        format!(r#"{{"model":"m","prompt":"p","x":{closed}}}"#),
    ];
    for b in bodies {
        let (status, _, answer) = post(&format!("{}/v1/completions", r.url()), b, &[]).await;
        assert_openai_error(
            status,
            &answer,
            400,
            "invalid_request_error",
            "invalid_json",
        );
    }
    let (status, _) = get(&format!("{}/healthz", r.url())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up.request_count(), 0);
    assert_eq!(r.access_log().len(), 3);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A compressed body (415 `unsupported_content_encoding`) and members of a shape no OpenAI
/// API accepts (400 `invalid_value`, naming the member): nothing is sent on, and the
/// answer says what to fix instead of "no prompt found".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_compressed_or_of_the_wrong_shape() {
    let up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("", up.addr, "").await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let (status, _, answer) = post(&chat_url(&r), body, &[("content-encoding", "gzip")]).await;
    assert_openai_error(
        status,
        &answer,
        415,
        "invalid_request_error",
        "unsupported_content_encoding",
    );
    let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        v["error"]["message"],
        "unsupported Content-Encoding \"gzip\": send the JSON body uncompressed"
    );
    for (body, param, message) in [
        (
            r#"{"model":"m","messages":"hi"}"#,
            "messages",
            "invalid field `messages`: must be an array of messages",
        ),
        (
            r#"{"model":"m","prompt":7}"#,
            "prompt",
            "invalid field `prompt`: must be a string, an array of strings or an array of token ids",
        ),
        (
            r#"{"model":"m","input":{"text":"hi"}}"#,
            "input",
            "invalid field `input`: must be a string or an array of input items",
        ),
        (
            r#"{"model":"m","prompt":"hi","stream":true,"stream_options":7}"#,
            "stream_options",
            "invalid field `stream_options`: must be an object or null",
        ),
    ] {
        let (status, _, answer) = post(&format!("{}/v1/completions", r.url()), body, &[]).await;
        assert_openai_error(
            status,
            &answer,
            400,
            "invalid_request_error",
            "invalid_value",
        );
        let v: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(v["error"]["param"], param, "{body}");
        assert_eq!(v["error"]["message"], message, "{body}");
    }
    assert_eq!(up.request_count(), 0);
    assert_eq!(r.access_log().len(), 5);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}
