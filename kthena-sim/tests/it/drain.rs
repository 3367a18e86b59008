//! Graceful shutdown of one engine (`SimHandle::drain`, the standalone binary's SIGTERM):
//! what vLLM does with `--shutdown-timeout`: no new work, what is in flight finishes.
#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::time::Duration;

use crate::common::{cfg, stream};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A kept-alive HTTP/1.1 connection to `addr`, opened before the drain.
async fn open_connection(
    addr: std::net::SocketAddr,
    tasks: &mut JoinSet<()>,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tasks.spawn(async move {
        let _ = conn.await;
    });
    send
}

fn chat(max_tokens: u32, stream: bool) -> serde_json::Value {
    json!({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}],
           "max_tokens": max_tokens, "stream": stream})
}

/// During the drain: new connections are refused, a request on a connection opened before
/// gets 503 (or finds it closed), and the stream under way ends with `[DONE]`; the drain
/// reports success once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_finishes_the_stream_in_flight_and_takes_no_new_work() {
    let sim = std::sync::Arc::new(kthena_sim::spawn(cfg().with_time_scale(1.0)).await.unwrap());
    let addr = sim.addr();
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let mut conns = JoinSet::new();
    let mut kept = open_connection(addr, &mut conns).await;
    // About 1.5 s of decoding at the default profile.
    let mut streaming = JoinSet::new();
    streaming.spawn({
        let url = url.clone();
        async move { stream(&url, &chat(150, true)).await }
    });
    let t0 = Instant::now();
    while sim.in_flight() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the stream never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut drain = JoinSet::new();
    drain.spawn({
        let sim = std::sync::Arc::clone(&sim);
        async move { sim.drain(Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "a new connection was accepted while draining"
    );
    let req = http::Request::post("/v1/chat/completions")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(chat(2, false).to_string())))
        .unwrap();
    match kept.send_request(req).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"]["message"], "The server is shutting down");
        }
        // The idle connection was closed by the drain before the request went out.
        Err(e) => assert!(e.is_closed() || e.is_canceled(), "{e}"),
    }
    let (status, events, clean) = streaming.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(clean, "the stream was cut after {} events", events.len());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let drained = drain.join_next().await.unwrap().unwrap();
    assert!(drained, "the drain reported requests left");
}

/// Past the grace, the drain kills the engine: the stream is cut, the drain says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_cuts_what_is_left_at_the_grace() {
    let sim = std::sync::Arc::new(kthena_sim::spawn(cfg().with_time_scale(1.0)).await.unwrap());
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let mut streaming = JoinSet::new();
    streaming.spawn(async move { stream(&url, &chat(2000, true)).await });
    let t0 = Instant::now();
    while sim.in_flight() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the stream never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t0 = Instant::now();
    assert!(!sim.drain(Duration::from_millis(300)).await);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let (status, events, clean) = streaming.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(
        !clean,
        "the stream ended cleanly after {} events",
        events.len()
    );
}
