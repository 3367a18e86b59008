//! Shutdown cut short: a second SIGTERM (or Ctrl-C) during the drain ends what is still in
//! flight at once, as the drain timeout would, instead of waiting out `drainTimeout`.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use crate::faults_support::*;
use http::StatusCode;
use http_body_util::BodyExt as _;

/// Reads `body` until two SSE events came, then returns what came.
async fn two_events(body: &mut hyper::body::Incoming) -> Vec<u8> {
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("\n\ndata: ") {
        let frame = body.frame().await.unwrap().unwrap();
        seen.extend_from_slice(&frame.into_data().unwrap());
    }
    seen
}

/// Reads `body` to its end (at most 5 s); returns the text and whether it ended broken.
async fn rest_of(body: &mut hyper::body::Incoming, seen: &mut Vec<u8>) -> bool {
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => seen.extend_from_slice(&f.into_data().unwrap_or_default()),
                Err(_) => return true,
            }
        }
        false
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the client stream did not end")
}

/// `Router::shutdown_or_cut`: with `drainTimeout: 1h` and a stream open, the drain ends
/// when the cut future completes; the stream ends with the `drain_timeout` event and the
/// access log says `drain_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_ends_when_the_cut_comes() {
    let mut up = FaultUpstream::start(Fault::StallMidStream { events: 2 }).await;
    let r = fault_router("drainTimeout: 1h\n", up.addr, "").await;
    let url = format!("{}/v1/chat/completions", r.url());
    let resp = post_stream(&url, chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut seen = two_events(&mut body).await;
    let TestRouter { dir, router } = r;
    let (cut_tx, cut_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = router.shutdown_or_cut(async {
        let _ = cut_rx.await;
    });
    let client = async {
        // Draining: the stream is still open and nothing is cut before the signal.
        let early = tokio::time::timeout(Duration::from_millis(300), body.frame()).await;
        assert!(early.is_err(), "the stream moved before the cut: {early:?}");
        cut_tx.send(()).unwrap();
        rest_of(&mut body, &mut seen).await
    };
    let (broken, ()) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(client, shutdown)
    })
    .await
    .expect("shutdown did not finish after the cut");
    assert!(broken, "the stream ended cleanly");
    assert_eq!(last_sse_event(&seen)["error"]["code"], "drain_timeout");
    up.expect_disconnect().await;
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(line["error"]["type"], "drain_timeout", "{line}");
    assert_eq!(line["error_origin"], "internal", "{line}");
}

/// Sends `signal` (`TERM`, `INT`) to `child`.
fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Polls until `port` on 127.0.0.1 refuses connections (at most 5 s).
async fn until_refused(port: u16) {
    for _ in 0..250 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("port {port} still accepts after SIGTERM");
}

/// Polls until `child` exits (at most 5 s); its exit code.
async fn exit_code(child: &mut Child) -> Option<i32> {
    for _ in 0..250 {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    panic!("the router did not exit within 5 s of the second SIGTERM");
}

/// The binary: the first SIGTERM starts the drain (the listener closes, the open stream
/// goes on; a SIGINT right after it is the same stop), the second, a second later, cuts it:
/// the stream ends with the `drain_timeout` event and the process exits 0 at once, although
/// `drainTimeout` is an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_cuts_the_drain_short() {
    let up = FaultUpstream::start(Fault::StallMidStream { events: 2 }).await;
    let dir = tempfile::tempdir().unwrap();
    let mdir = dir.path().join("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(mdir.join("s.yaml"), model_server("srv", "m", "x", "")).unwrap();
    std::fs::write(mdir.join("r.yaml"), simple_route("route", "m", "srv")).unwrap();
    let cfg = dir.path().join("router.yaml");
    let text = format!(
        "drainTimeout: 1h\nmetricsScrapeInterval: 1h\nbindAddress: 127.0.0.1\n\
         standalone:\n  manifests: [manifests]\n  endpoints:\n{}",
        endpoint("e", up.addr, "x")
    );
    std::fs::write(&cfg, text).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kthena-router"))
        .arg("--config")
        .arg(&cfg)
        .args(["--port", &port.to_string()])
        .args(["--metrics-port", &free_port().to_string()])
        .args(["--debug-port", &free_port().to_string()])
        .env("NO_COLOR", "1")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut listening = false;
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            listening = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(listening, "the router never listened on {port}");
    assert_eq!(get(&format!("{url}/v1/models")).await.0, StatusCode::OK);
    let resp = post_stream(
        &format!("{url}/v1/chat/completions"),
        chat("m", "hi", true, 4),
        &[],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut seen = two_events(&mut body).await;
    signal(&child, "TERM");
    let first = tokio::time::Instant::now();
    // The same stop delivered twice at once (Ctrl-C reaching the router and the script that
    // started it) is one stop: the drain goes on.
    signal(&child, "INT");
    until_refused(port).await;
    tokio::time::sleep_until(first + Duration::from_millis(1200)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the router exited on the first SIGTERM with a stream open"
    );
    let early = tokio::time::timeout(Duration::from_millis(100), body.frame()).await;
    assert!(
        early.is_err(),
        "the stream moved before the second signal: {early:?}"
    );
    signal(&child, "TERM");
    let broken = rest_of(&mut body, &mut seen).await;
    assert!(broken, "the stream ended cleanly");
    assert_eq!(last_sse_event(&seen)["error"]["code"], "drain_timeout");
    assert_eq!(exit_code(&mut child).await, Some(0));
}
