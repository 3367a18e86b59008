//! Slow-client protection over real sockets: slowloris clients (partial heads, partial or
//! trickled bodies, silent connections) are cut by the listener timeouts and counted, while
//! normal traffic to a kthena-sim engine is served; the connection cap holds new connections
//! until one closes.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::task::TaskTracker;

const CHAT: &str =
    r#"{"model":"public","messages":[{"role":"user","content":"hello"}],"max_tokens":3}"#;

/// Reads until the router closes the connection (or resets it); bounded so a connection the
/// router never closes fails the test instead of hanging it.
async fn read_until_closed(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let res = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    match res {
        Ok(Ok(_)) => out,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => out,
        Ok(Err(e)) => panic!("read failed: {e}"),
        Err(_) => panic!("the router did not close a slow connection"),
    }
}

async fn partial_head(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: appl")
        .await
        .unwrap();
    read_until_closed(s).await
}

/// The first 16 of HTTP/2's 24 preface bytes: the router is still telling HTTP/1 from
/// HTTP/2 prior knowledge.
async fn partial_h2_preface(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    read_until_closed(s).await
}

/// One complete request, then the kept-alive connection stays silent.
async fn idle_after_request(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: router\r\n\r\n")
        .await
        .unwrap();
    read_until_closed(s).await
}

async fn partial_body(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        CHAT.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&CHAT.as_bytes()[..20]).await.unwrap();
    read_until_closed(s).await
}

/// Sends one body byte every `every`: never idle for long, but never done.
async fn trickled_body(addr: std::net::SocketAddr, every: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Length: {}\r\n\r\n",
        CHAT.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let write = async move {
        for b in CHAT.as_bytes() {
            tokio::time::sleep(every).await;
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
        }
    };
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), rd.read_to_end(&mut out));
    let (res, ()) = tokio::join!(read, write);
    res.expect("the router did not answer the trickled body")
        .unwrap();
    out
}

fn status_line(resp: &[u8]) -> String {
    String::from_utf8_lossy(resp)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn body_json(resp: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(resp);
    let (_, body) = text.split_once("\r\n\r\n").expect("no body");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// 50 partial heads, 5 partial HTTP/2 prefaces, 50 partial bodies, 5 silent connections, one
/// kept-alive connection left idle and one trickled body are all closed by the timeouts (408
/// with an access-log line for the bodies), counted by phase, while chats through the router
/// succeed the whole time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_clients_are_cut_and_normal_traffic_is_served() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms\nlistener: {headerReadTimeout: 1s, bodyReadIdleTimeout: 1s, bodyReadTimeout: 2s}",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let addr = r.router.addr;
    let url = format!("{}/v1/chat/completions", r.url());
    let tasks = TaskTracker::new();

    // Normal traffic, two clients in a loop, until the slow clients are done.
    let done = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let mut normal = Vec::new();
    for _ in 0..2 {
        let (done, served, url) = (Arc::clone(&done), Arc::clone(&served), url.clone());
        normal.push(tasks.spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let (status, _, body) = post(&url, CHAT, &[]).await;
                assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
                served.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }

    let heads: Vec<_> = (0..50).map(|_| tasks.spawn(partial_head(addr))).collect();
    let bodies: Vec<_> = (0..50).map(|_| tasks.spawn(partial_body(addr))).collect();
    let silent: Vec<_> = (0..5)
        .map(|_| {
            tasks.spawn(
                async move { read_until_closed(TcpStream::connect(addr).await.unwrap()).await },
            )
        })
        .collect();
    let trickle = tasks.spawn(trickled_body(addr, Duration::from_millis(200)));
    let prefaces: Vec<_> = (0..5)
        .map(|_| tasks.spawn(partial_h2_preface(addr)))
        .collect();
    let kept = tasks.spawn(idle_after_request(addr));

    for h in heads {
        // Closed without an answer: no request ever reached the router.
        assert_eq!(h.await.unwrap(), b"");
    }
    for s in silent.into_iter().chain(prefaces) {
        assert_eq!(s.await.unwrap(), b"");
    }
    // The answer to the one request, then the close at the header timeout.
    let resp = kept.await.unwrap();
    assert_eq!(status_line(&resp), "HTTP/1.1 200 OK");
    assert!(String::from_utf8_lossy(&resp).ends_with(r#"{"message":"ok"}"#));
    for b in bodies {
        let resp = b.await.unwrap();
        assert_eq!(status_line(&resp), "HTTP/1.1 408 Request Timeout");
        assert!(
            String::from_utf8_lossy(&resp).contains("\r\nconnection: close\r\n"),
            "{}",
            String::from_utf8_lossy(&resp)
        );
        let v = body_json(&resp);
        assert_eq!(v["error"]["code"], "request_timeout");
        assert_eq!(
            v["error"]["message"],
            "request body stalled: no data for 1s"
        );
    }
    let resp = trickle.await.unwrap();
    assert_eq!(status_line(&resp), "HTTP/1.1 408 Request Timeout");
    assert_eq!(
        body_json(&resp)["error"]["message"],
        "request body not received within 2s"
    );
    done.store(true, Ordering::Relaxed);
    for n in normal {
        n.await.unwrap();
    }
    assert!(served.load(Ordering::Relaxed) >= 2);

    let m = |phase: &str| {
        format!(r#"kthena_router_client_timeouts_total{{listener="inference",phase="{phase}"}}"#)
    };
    assert_eq!(r.metric(&m("headers")).await, 55.0);
    assert_eq!(r.metric(&m("idle")).await, 6.0);
    assert_eq!(r.metric(&m("body")).await, 51.0);

    let log = r.access_log();
    let timeouts: Vec<_> = log.iter().filter(|e| e["status_code"] == 408).collect();
    assert_eq!(timeouts.len(), 51);
    for e in &timeouts {
        assert_eq!(e["path"], "/v1/chat/completions");
        assert_eq!(e["error"]["type"], "request_timeout");
        assert_eq!(e["error_origin"], "downstream");
    }
    let ok = log.iter().filter(|e| e["status_code"] == 200).count();
    assert_eq!(ok, served.load(Ordering::Relaxed));
    assert_eq!(log.len(), 51 + ok);
}

/// At `maxConnections` the listener stops accepting: a new client waits until one of the
/// open connections closes, then it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_holds_new_connections_until_one_closes() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms\nlistener: {maxConnections: 3, headerReadTimeout: 30s}",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let open = r#"kthena_router_downstream_connections{listener="inference"}"#;
    let reached =
        r#"kthena_router_downstream_connection_limit_reached_total{listener="inference"}"#;
    // `wait_ready`'s connections close; the gauge returns to 0.
    while r.metric(open).await != 0.0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(r.router.addr).await.unwrap());
    }
    while r.metric(open).await != 3.0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(r.metric(reached).await, 1.0);

    let url = format!("{}/v1/chat/completions", r.url());
    let tasks = TaskTracker::new();
    let mut waiting = tasks.spawn(async move { post(&url, CHAT, &[]).await });
    // Not accepted while three connections are open.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err(),
        "a fourth connection was served at maxConnections: 3"
    );
    assert!(r.access_log().is_empty());
    drop(held.pop());
    let (status, _, body) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let log = r.access_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["status_code"], 200);
    // The metrics listener has its own cap: it answered all along (`r.metric` above).
}
