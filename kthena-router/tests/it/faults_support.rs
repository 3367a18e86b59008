//! Support of the fault-matrix tests: a scripted engine over a raw TCP socket that misbehaves
//! on purpose (resets, stalls, broken SSE, floods), and the check that every router counter
//! of in-flight work is back to zero.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::common::{TestRouter, get};

/// What the scripted engine does with each inference request (`/metrics` and `/v1/models`
/// are always answered normally, so the endpoint stays ready).
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    /// Reads the request, then resets the connection (TCP RST) without an answer.
    ResetBeforeHeaders,
    /// Sends SSE headers and `events` events, then resets the connection.
    ResetMidStream { events: usize },
    /// Reads the request and never answers.
    StallBeforeHeaders,
    /// Sends SSE headers and `events` events, then sends nothing more.
    StallMidStream { events: usize },
    /// Writes these bytes as the whole answer, then closes the connection.
    Raw(&'static [u8]),
    /// Answers 200 `text/event-stream` (chunked) and writes `bytes` of SSE events as fast as
    /// the router reads them, then `data: [DONE]`.
    Flood { bytes: usize },
}

/// A scripted engine on 127.0.0.1:0.
pub(crate) struct FaultUpstream {
    pub addr: SocketAddr,
    /// Inference requests received (complete request heads and bodies).
    pub requests: Arc<AtomicUsize>,
    /// Body bytes written so far by [`Fault::Flood`].
    pub written: Arc<AtomicUsize>,
    /// One message per inference connection that the router closed while the engine was
    /// waiting (stalled) or writing.
    pub disconnects: mpsc::UnboundedReceiver<()>,
    tasks: TaskTracker,
}

impl FaultUpstream {
    /// Starts the engine.
    pub(crate) async fn start(fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, fault)
    }

    /// Serves `fault` on an already bound listener.
    pub(crate) fn serve(listener: TcpListener, fault: Fault) -> Self {
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let written = Arc::new(AtomicUsize::new(0));
        let (tx, disconnects) = mpsc::unbounded_channel();
        let tasks = TaskTracker::new();
        let (r2, w2, t2) = (Arc::clone(&requests), Arc::clone(&written), tasks.clone());
        tasks.spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let conn = Conn {
                    fault: fault.clone(),
                    requests: Arc::clone(&r2),
                    written: Arc::clone(&w2),
                    disconnects: tx.clone(),
                };
                t2.spawn(conn.run(s));
            }
        });
        Self {
            addr,
            requests,
            written,
            disconnects,
            tasks,
        }
    }

    /// Inference requests received so far.
    pub(crate) fn request_count(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Waits (at most 5 s) until the router closed one stalled or streaming connection.
    pub(crate) async fn expect_disconnect(&mut self) {
        tokio::time::timeout(Duration::from_secs(5), self.disconnects.recv())
            .await
            .expect("the engine never saw the router close the connection")
            .unwrap();
    }
}

impl Drop for FaultUpstream {
    fn drop(&mut self) {
        self.tasks.close();
    }
}

struct Conn {
    fault: Fault,
    requests: Arc<AtomicUsize>,
    written: Arc<AtomicUsize>,
    disconnects: mpsc::UnboundedSender<()>,
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// One SSE event as an HTTP/1.1 chunk.
pub(crate) fn sse_chunk(n: usize) -> Vec<u8> {
    let ev = format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"t{n}\"}}]}}\n\n");
    let mut c = format!("{:x}\r\n", ev.len()).into_bytes();
    c.extend_from_slice(ev.as_bytes());
    c.extend_from_slice(b"\r\n");
    c
}

impl Conn {
    async fn run(self, s: TcpStream) {
        let mut s = BufReader::new(s);
        loop {
            let Some(path) = read_request(&mut s).await else {
                return;
            };
            if path == "/metrics" || path == "/v1/models" {
                let body: &[u8] = if path == "/metrics" {
                    b"vllm:num_requests_waiting 0\n"
                } else {
                    br#"{"data":[{"id":"scripted"}]}"#
                };
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                let w = s.get_mut();
                if w.write_all(head.as_bytes()).await.is_err() || w.write_all(body).await.is_err() {
                    return;
                }
                continue;
            }
            self.requests.fetch_add(1, Ordering::SeqCst);
            self.misbehave(s.into_inner()).await;
            return;
        }
    }

    async fn misbehave(&self, mut s: TcpStream) {
        match &self.fault {
            Fault::ResetBeforeHeaders => reset(s),
            Fault::ResetMidStream { events } => {
                let _ = s.write_all(SSE_HEAD).await;
                for n in 0..*events {
                    let _ = s.write_all(&sse_chunk(n)).await;
                }
                let _ = s.flush().await;
                // Let the router read the events before the reset (a reset drops data still
                // unread in the router's receive buffer).
                tokio::time::sleep(Duration::from_millis(200)).await;
                reset(s);
            }
            Fault::StallBeforeHeaders => self.wait_close(s).await,
            Fault::StallMidStream { events } => {
                let _ = s.write_all(SSE_HEAD).await;
                for n in 0..*events {
                    let _ = s.write_all(&sse_chunk(n)).await;
                }
                self.wait_close(s).await;
            }
            Fault::Raw(bytes) => {
                let _ = s.write_all(bytes).await;
                let _ = s.shutdown().await;
            }
            Fault::Flood { bytes } => self.flood(s, *bytes).await,
        }
    }

    async fn flood(&self, mut s: TcpStream, bytes: usize) {
        if s.write_all(SSE_HEAD).await.is_err() {
            return;
        }
        // 64 KiB chunks of one SSE comment line each (`:` lines are ignored by clients).
        let line = {
            let mut l = vec![b':'; 64 * 1024 - 1];
            l.push(b'\n');
            l
        };
        let chunk = [
            format!("{:x}\r\n", line.len()).into_bytes(),
            line.clone(),
            b"\r\n".to_vec(),
        ]
        .concat();
        let mut sent = 0;
        while sent < bytes {
            if s.write_all(&chunk).await.is_err() {
                let _ = self.disconnects.send(());
                return;
            }
            sent += line.len();
            self.written.store(sent, Ordering::SeqCst);
        }
        let done = b"data: [DONE]\n\n";
        let tail = [
            format!("{:x}\r\n", done.len()).into_bytes(),
            done.to_vec(),
            b"\r\n0\r\n\r\n".to_vec(),
        ]
        .concat();
        let _ = s.write_all(&tail).await;
        let _ = s.flush().await;
        self.wait_close(s).await;
    }

    /// Reads until the peer closes, then reports it.
    async fn wait_close(&self, mut s: TcpStream) {
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = self.disconnects.send(());
    }
}

/// Closes with a TCP RST (SO_LINGER 0).
fn reset(s: TcpStream) {
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
}

/// Reads one request head and its `Content-Length` body; returns the path (None at EOF).
pub(crate) async fn read_request(s: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    if s.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if s.read_line(&mut h).await.ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    Some(path)
}

/// A port on 127.0.0.1 where nothing listens (bound, then released).
pub(crate) fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Waits (at most 5 s) until every counter of in-flight work is back to zero: each
/// endpoint's `inFlight`, `awaitingFirstToken` and `pendingPrefillTokens` (from
/// `/debug/config_dump/pods`) and every `kthena_router_active_*` gauge of `/metrics`.
pub(crate) async fn assert_counters_zero(r: &TestRouter) {
    assert_router_idle(&r.router).await;
}

/// [`assert_counters_zero`] for any router.
pub(crate) async fn assert_router_idle(router: &kthena_router::Router) {
    let mut last = String::new();
    for _ in 0..250 {
        let mut busy = Vec::new();
        for ep in &router.snapshot().endpoints {
            if ep.in_flight() != 0 {
                busy.push(format!("{} inFlight={}", ep.name, ep.in_flight()));
            }
        }
        let (_, pods) = get(&format!(
            "http://{}/debug/config_dump/pods",
            router.debug_addr
        ))
        .await;
        let v: serde_json::Value = serde_json::from_str(&pods).unwrap();
        for p in v["pods"].as_array().unwrap() {
            let m = &p["metrics"];
            for k in ["inFlight", "awaitingFirstToken", "pendingPrefillTokens"] {
                if m[k].as_u64().is_some_and(|n| n != 0) {
                    busy.push(format!("{} {k}={}", p["name"], m[k]));
                }
            }
        }
        let (_, text) = get(&format!("http://{}/metrics", router.metrics_addr)).await;
        for l in text
            .lines()
            .filter(|l| l.starts_with("kthena_router_active_"))
        {
            if l.rsplit(' ').next().is_some_and(|v| v.trim() != "0") {
                busy.push(l.to_owned());
            }
        }
        if busy.is_empty() {
            return;
        }
        last = busy.join("; ");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("counters did not return to zero: {last}");
}

/// Waits (at most 5 s) until the access log has `n` lines and returns the last one.
pub(crate) async fn last_log_line(r: &TestRouter, n: usize) -> serde_json::Value {
    for _ in 0..250 {
        let log = r.access_log();
        if log.len() >= n {
            return log[n - 1].clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("access log has fewer than {n} lines: {:?}", r.access_log());
}

/// Reads a streaming body to its end: `(text, ended with an error)`.
pub(crate) async fn read_stream(body: hyper::body::Incoming) -> (String, bool) {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut text = String::new();
    while let Some(f) = body.frame().await {
        match f {
            Ok(f) => {
                if let Ok(d) = f.into_data() {
                    text.push_str(&String::from_utf8_lossy(&d));
                }
            }
            Err(_) => return (text, true),
        }
    }
    (text, false)
}

/// A router with one endpoint `e` at `addr` serving model `m` (ModelServer `srv` with
/// `extra_spec`, route `route`), metrics scraped once at start.
pub(crate) async fn fault_router(head: &str, addr: SocketAddr, extra_spec: &str) -> TestRouter {
    TestRouter::start(
        &format!("metricsScrapeInterval: 1h\n{head}"),
        &crate::common::endpoint("e", addr, "x"),
        &[
            (
                "s.yaml",
                crate::common::model_server("srv", "m", "x", extra_spec),
            ),
            ("r.yaml", crate::common::simple_route("route", "m", "srv")),
        ],
    )
    .await
}

/// [`fault_router`] with Go Kthena's environment variables `env` (the queues' switches).
pub(crate) async fn fault_router_with_env(addr: SocketAddr, env: &[(&str, &str)]) -> TestRouter {
    TestRouter::start_with_env(
        "metricsScrapeInterval: 1h",
        &crate::common::endpoint("e", addr, "x"),
        &[
            ("s.yaml", crate::common::model_server("srv", "m", "x", "")),
            ("r.yaml", crate::common::simple_route("route", "m", "srv")),
        ],
        env,
    )
    .await
}

/// Waits (at most 5 s) until the `/metrics` series line `series` has the value `want`.
pub(crate) async fn wait_metric(r: &TestRouter, series: &str, want: f64) {
    for _ in 0..250 {
        if r.metric(series).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{series} never reached {want}: {}", r.metric(series).await);
}

/// Asserts an OpenAI-shaped error answer: `{"error":{"message","type","param","code"}}`.
pub(crate) fn assert_openai_error(
    status: http::StatusCode,
    body: &[u8],
    want: u16,
    kind: &str,
    code: &str,
) {
    let text = String::from_utf8_lossy(body);
    assert_eq!(status.as_u16(), want, "{text}");
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!("error body is not JSON ({e}): {text}");
    });
    assert_eq!(v["error"]["type"], kind, "{text}");
    assert_eq!(v["error"]["code"], code, "{text}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{text}"
    );
    assert!(v["error"].get("param").is_some(), "{text}");
}

/// The JSON of the last `data:` event of an SSE body (fails the test when there is none).
pub(crate) fn last_sse_event(body: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(body);
    let last = text
        .rsplit("\n\n")
        .find(|e| !e.is_empty())
        .and_then(|e| e.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("no event at the end: {text:?}"));
    serde_json::from_str(last).unwrap()
}
