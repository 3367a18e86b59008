//! Multipart uploads stream through the router: the body is read up to the end of its
//! `model` field (that prefix is held on the body budget), the rest goes to the engine as it
//! arrives, under the same size limit and read timeouts; a connect failure before the rest
//! was taken is retried, an engine error after it is not; a `model` after the file is held
//! whole as before.

#![allow(clippy::unwrap_used, reason = "a test fails on any error")]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;
use crate::faults_support::{assert_counters_zero, closed_port, last_log_line, wait_metric};

/// The budget gauge of the bytes of request bodies the router holds.
const HELD: &str = "kthena_router_buffered_request_body_bytes";

/// The form's first bytes: the `model` field, then the head of the `file` part.
fn form_head(model: &str) -> Vec<u8> {
    format!(
        "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
    )
    .into_bytes()
}

/// The form's last bytes, after the file.
const FORM_END: &[u8] = b"\r\n--B--\r\n";

/// The request head of an upload of `len` bytes (`None`: chunked) to `/v1/audio/transcriptions`.
fn request_head(len: Option<usize>) -> Vec<u8> {
    let framing = len.map_or_else(
        || "transfer-encoding: chunked".to_owned(),
        |n| format!("content-length: {n}"),
    );
    format!(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=B\r\n{framing}\r\nconnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// One HTTP/1.1 chunk of `data`.
fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// Reads the answer until the router closes: (status, JSON body).
async fn answer(s: &mut TcpStream) -> (u16, Value) {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no answer: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// A router over the endpoints `eps` (`(name, address)`, all of app `a`, serving model `m`,
/// ranked by least request, ties by name), with `head` config.
async fn router(head: &str, eps: &[(&str, SocketAddr)]) -> TestRouter {
    let eps: String = eps.iter().map(|(n, a)| endpoint(n, *a, "a")).collect();
    let head = format!("metricsScrapeInterval: 1h\n{LEAST_REQUEST_ONLY}{head}");
    let r = TestRouter::start(
        &head,
        &eps,
        &[
            ("s.yaml", model_server("srv", "m", "a", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    r
}

/// Sends a sized upload of model `m` with `audio` bytes of file to `r` (waiting until the
/// router holds the form's head) and returns the connection to read the answer from.
async fn send_sized(r: &TestRouter, audio: usize) -> TcpStream {
    let head = form_head("m");
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(&request_head(Some(head.len() + audio + FORM_END.len())))
        .await
        .unwrap();
    s.write_all(&head).await.unwrap();
    wait_metric(r, HELD, head.len() as f64).await;
    s.write_all(&vec![9u8; audio]).await.unwrap();
    s.write_all(FORM_END).await.unwrap();
    s
}

/// Sends a chunked upload of model `m` to `r`: the form's head (waiting until the router
/// holds it), `blocks` chunks of 64 KiB of file, then `end` as the last chunk.
async fn send_chunked(r: &TestRouter, blocks: usize, end: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(&request_head(None)).await.unwrap();
    s.write_all(&chunk(&form_head("m"))).await.unwrap();
    wait_metric(r, HELD, form_head("m").len() as f64).await;
    let mut req = Vec::new();
    for _ in 0..blocks {
        req.extend_from_slice(&chunk(&[1u8; 64 << 10]));
    }
    if !end.is_empty() {
        req.extend_from_slice(&chunk(end));
    }
    req.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&req).await.unwrap();
    s
}

/// `vllm:request_success_total{finished_reason="abort",...}` of the sim at `addr`.
async fn aborted(addr: SocketAddr) -> f64 {
    let (_, text) = get(&format!("http://{addr}/metrics")).await;
    text.lines()
        .filter(|l| l.starts_with("vllm:request_success_total{") && l.contains("\"abort\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits (at most 5 s) until the sim at `addr` counted `want` aborted requests.
async fn wait_aborted(addr: SocketAddr, want: f64) {
    for _ in 0..250 {
        if aborted(addr).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the engine counted {} aborted requests",
        aborted(addr).await
    );
}

/// An 8 MiB upload under a 1 MiB body budget (`maxBodyBytes` 32 MiB) reaches the engine
/// whole; while it streams the router holds exactly the bytes it read up to the `model`
/// field, and nothing once answered. Sent in 64 KiB writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_larger_than_the_body_budget_streams_holding_its_prefix_only() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router(
        "maxBodyBytes: 33554432\nlistener:\n  maxBufferedBodyBytes: 1048576\n",
        &[("a-0", sim.addr())],
    )
    .await;
    let head = form_head("m");
    let audio = 8usize << 20;
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(&request_head(Some(head.len() + audio + FORM_END.len())))
        .await
        .unwrap();
    s.write_all(&head).await.unwrap();
    wait_metric(&r, HELD, head.len() as f64).await;
    let block = vec![5u8; 64 << 10];
    for i in 0..audio / block.len() {
        s.write_all(&block).await.unwrap();
        if i == 64 {
            // 4 MiB in: still only the prefix is held.
            assert_eq!(r.metric(HELD).await, head.len() as f64);
        }
    }
    s.write_all(FORM_END).await.unwrap();
    let (status, body) = answer(&mut s).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["text"], format!("{audio} bytes of audio"));
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_eq!(aborted(sim.addr()).await, 0.0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A chunked upload that passes `maxBodyBytes` (2 MiB) while it streams: 413
/// `request_too_large` to the client, the engine's request is cut off (it counts an
/// aborted request), and nothing stays held or in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_upload_over_max_body_bytes_is_413_and_the_engine_request_aborted() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router(
        "maxBodyBytes: 2097152\nlistener:\n  maxBufferedBodyBytes: 1048576\n",
        &[("a-0", sim.addr())],
    )
    .await;
    let mut s = send_chunked(&r, 33, &[]).await;
    let (status, body) = answer(&mut s).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "request_too_large");
    wait_aborted(sim.addr(), 1.0).await;
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 413, "{line}");
    assert_eq!(line["selected_pod"], "a-0", "{line}");
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A client that leaves mid-upload: the engine's request is cut off, the access log has
/// 499 `client_disconnect`, every in-flight counter is back to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_upload_is_499_and_cancels_the_engine_request() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router("", &[("a-0", sim.addr())]).await;
    let head = form_head("m");
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(&request_head(Some(head.len() + (1 << 20) + FORM_END.len())))
        .await
        .unwrap();
    s.write_all(&head).await.unwrap();
    s.write_all(&[3u8; 100_000]).await.unwrap();
    // The upload reached the engine.
    for _ in 0..250 {
        if sim.in_flight() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sim.in_flight(), 1);
    drop(s);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 499, "{line}");
    assert_eq!(line["error"]["type"], "client_disconnect", "{line}");
    wait_aborted(sim.addr(), 1.0).await;
    assert_eq!(sim.in_flight(), 0);
    wait_metric(&r, "kthena_router_active_upstream_requests", 0.0).await;
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// The first ranked endpoint refuses the connection before any of the rest of the upload
/// was taken: the upload goes whole to the next endpoint (two attempts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_before_the_rest_was_taken_is_retried() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router("", &[("a-0", closed_port()), ("a-1", sim.addr())]).await;
    let audio = 3usize << 20;
    let mut s = send_sized(&r, audio).await;
    let (status, body) = answer(&mut s).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["text"], format!("{audio} bytes of audio"));
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["upstream_attempts"], 2, "{line}");
    assert_eq!(line["selected_pod"], "a-1", "{line}");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// An engine that read the streamed rest and answered 500: no retry (the rest is gone),
/// the client gets that answer; the next endpoint never saw the upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_error_after_the_rest_was_sent_is_not_retried() {
    let failing = Upstream::start(Script::Status(500, r#"{"error":{"message":"boom"}}"#)).await;
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router("", &[("a-0", failing.addr), ("a-1", sim.addr())]).await;
    let head = form_head("m");
    let audio = 1usize << 20;
    let mut s = send_sized(&r, audio).await;
    let (status, body) = answer(&mut s).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["message"], "boom");
    let sent = failing.bodies.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].len(), head.len() + audio + FORM_END.len());
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["upstream_attempts"], 1, "{line}");
    assert_eq!(aborted(sim.addr()).await, 0.0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A `model` after a 2 MiB file is found only in the whole body, which is held: under a
/// 1 MiB budget it is refused 503 `request_buffer_full`; under the default budget it goes
/// through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_after_the_file_is_read_whole_and_held() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let mut body =
        b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
            .to_vec();
    body.extend_from_slice(&vec![4u8; 2 << 20]);
    body.extend_from_slice(
        b"\r\n--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--B--\r\n",
    );
    for (budget, want) in [(Some(1 << 20), 503), (None, 200)] {
        let head = budget.map_or_else(String::new, |b| {
            format!("listener:\n  maxBufferedBodyBytes: {b}\n")
        });
        let r = router(&head, &[("a-0", sim.addr())]).await;
        let mut s = TcpStream::connect(r.router.addr).await.unwrap();
        s.write_all(&request_head(Some(body.len()))).await.unwrap();
        s.write_all(&body).await.unwrap();
        let (status, answer_body) = answer(&mut s).await;
        assert_eq!(status, want, "{answer_body}");
        if want == 200 {
            assert_eq!(answer_body["text"], format!("{} bytes of audio", 2 << 20));
        } else {
            assert_eq!(answer_body["error"]["code"], "request_buffer_full");
        }
        assert_eq!(r.metric(HELD).await, 0.0);
        r.router.shutdown().await;
    }
}

/// A client that stops sending mid-upload for longer than `listener.bodyReadIdleTimeout`:
/// 408 `request_timeout`, the engine's request is cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_times_out_408_and_the_engine_request_aborted() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router(
        "listener:\n  bodyReadIdleTimeout: 300ms\n",
        &[("a-0", sim.addr())],
    )
    .await;
    let head = form_head("m");
    let mut s = TcpStream::connect(r.router.addr).await.unwrap();
    s.write_all(&request_head(Some(head.len() + (1 << 20) + FORM_END.len())))
        .await
        .unwrap();
    s.write_all(&head).await.unwrap();
    s.write_all(&[3u8; 100_000]).await.unwrap();
    let (status, body) = answer(&mut s).await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["code"], "request_timeout");
    wait_aborted(sim.addr(), 1.0).await;
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A streamed form with a second `model` part after its file (the router routes by the
/// first, an engine may read the last): 400 `invalid_value` on `model` to the client, the
/// engine's request cut off before the form ends, nothing held or in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_model_part_in_a_streamed_form_is_refused_and_the_engine_request_aborted() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = router(
        "listener:\n  maxBufferedBodyBytes: 1048576\n",
        &[("a-0", sim.addr())],
    )
    .await;
    let second =
        b"\r\n--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nother\r\n--B--\r\n";
    let mut s = send_chunked(&r, 16, second).await;
    let (status, body) = answer(&mut s).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "model", "{body}");
    assert_eq!(
        body["error"]["message"], "invalid field `model`: more than one `model` form field",
        "{body}"
    );
    wait_aborted(sim.addr(), 1.0).await;
    assert_eq!(r.metric(HELD).await, 0.0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}
