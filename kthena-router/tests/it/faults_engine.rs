//! Fault matrix, engine side: an engine that refuses, resets, stalls, sends broken SSE or a
//! non-JSON 200, answers 429, or dies and comes back. Each test checks what the client sees,
//! what the engine saw, and that the router's in-flight counters are back to zero.
//! The matrix is documented in docs/reliability.md.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::time::Duration;

use crate::common::*;
use crate::faults_support::*;
use http::StatusCode;

fn chat_url(r: &TestRouter) -> String {
    format!("{}/v1/chat/completions", r.url())
}

/// Nothing listens on the endpoint's port: 503 `upstream_unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_refuses_connection() {
    let r = fault_router("", closed_port(), "").await;
    let (status, _, body) = post(&chat_url(&r), chat("m", "hi", false, 4), &[]).await;
    assert_openai_error(
        status,
        &body,
        503,
        "service_unavailable_error",
        "upstream_unavailable",
    );
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error"]["type"], "proxy");
    assert_eq!(line["error_origin"], "upstream");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// The engine reads the request and resets the connection before any header: the attempt
/// failed, so the client gets 503 `upstream_unavailable`; the engine saw one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_resets_before_headers() {
    let up = FaultUpstream::start(Fault::ResetBeforeHeaders).await;
    let r = fault_router("", up.addr, "").await;
    let (status, _, body) = post(&chat_url(&r), chat("m", "hi", true, 4), &[]).await;
    assert_openai_error(
        status,
        &body,
        503,
        "service_unavailable_error",
        "upstream_unavailable",
    );
    assert_eq!(up.request_count(), 1);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A reset after two events: the client gets both events, then an SSE error event
/// (`upstream_stream_error`), then a broken stream; never `[DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_resets_mid_stream() {
    let up = FaultUpstream::start(Fault::ResetMidStream { events: 2 }).await;
    let r = fault_router("", up.addr, "").await;
    let resp = post_stream(&chat_url(&r), chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let (text, errored) = read_stream(resp.into_body()).await;
    assert!(errored, "the client stream ended cleanly: {text}");
    assert!(text.contains("\"t0\"") && text.contains("\"t1\""), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    let err_line = text
        .lines()
        .find(|l| l.contains("upstream_stream_error"))
        .unwrap_or_else(|| panic!("no error event: {text}"));
    let ev: serde_json::Value = serde_json::from_str(err_line.strip_prefix("data: ").unwrap())
        .unwrap_or_else(|e| panic!("error event is not JSON ({e}): {err_line}"));
    assert_eq!(ev["error"]["type"], "server_error");
    assert_eq!(up.request_count(), 1);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error"]["type"], "upstream_transport");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// An engine that never answers, with `trafficPolicy.timeout: 300ms`: 504
/// `upstream_timeout`, and the router closes the engine connection (the engine stops).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_stalls_before_first_byte() {
    let mut up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("", up.addr, "  trafficPolicy: {timeout: 300ms}\n").await;
    let (status, _, body) = tokio::time::timeout(
        Duration::from_secs(10),
        post(&chat_url(&r), chat("m", "hi", true, 4), &[]),
    )
    .await
    .expect("the router never answered a stalled engine");
    assert_openai_error(status, &body, 504, "timeout_error", "upstream_timeout");
    up.expect_disconnect().await;
    assert_eq!(up.request_count(), 1);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error"]["type"], "upstream_transport");
    assert_eq!(line["error_origin"], "upstream");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// An engine that stops sending mid-stream: after `upstreamIdleTimeout` the client gets an
/// SSE error event and a broken stream, and the engine connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_stalls_mid_stream() {
    let mut up = FaultUpstream::start(Fault::StallMidStream { events: 2 }).await;
    let r = fault_router("upstreamIdleTimeout: 300ms", up.addr, "").await;
    let resp = post_stream(&chat_url(&r), chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let (text, errored) =
        tokio::time::timeout(Duration::from_secs(10), read_stream(resp.into_body()))
            .await
            .expect("a stalled stream was never ended");
    assert!(errored, "the client stream ended cleanly: {text}");
    assert!(text.contains("\"t1\""), "{text}");
    assert!(text.contains("upstream_stream_error"), "{text}");
    assert!(text.contains("no data from the engine for 300ms"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    up.expect_disconnect().await;
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error"]["type"], "upstream_transport");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// Invalid SSE (not JSON, no `data:` prefix, an unfinished last line) is passed through byte
/// for byte; the stream ends as the engine ended it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_sends_invalid_sse() {
    const BODY: &str =
        "data: {not json\n\ngarbage line\r\ndata: {\"choices\":7}\n\n\u{0}\u{1}data: [DONE";
    const RAW: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 65\r\n\r\ndata: {not json\n\ngarbage line\r\ndata: {\"choices\":7}\n\n\x00\x01data: [DONE";
    assert_eq!(BODY.len(), 65);
    let up = FaultUpstream::start(Fault::Raw(RAW)).await;
    let r = fault_router("", up.addr, "").await;
    let resp = post_stream(&chat_url(&r), chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let (text, errored) = read_stream(resp.into_body()).await;
    assert!(!errored, "{text}");
    assert_eq!(text, BODY);
    assert_eq!(up.request_count(), 1);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 200);
    assert!(line.get("error").is_none(), "{line}");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A 200 whose body is not JSON reaches the client unchanged (the router does not judge an
/// engine's 2xx); no usage is read from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_sends_200_with_non_json_body() {
    const RAW: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 18\r\n\r\n<html>oops</html>\n";
    let up = FaultUpstream::start(Fault::Raw(RAW)).await;
    let r = fault_router("", up.addr, "").await;
    let (status, headers, body) = post(&chat_url(&r), chat("m", "hi", false, 4), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(&body[..], b"<html>oops</html>\n");
    assert_eq!(up.request_count(), 1);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 200);
    assert_eq!(line["output_tokens"].as_u64().unwrap_or(0), 0);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A 429 with `Retry-After` from the only endpoint reaches the client unchanged, header
/// included; the engine saw one request (no retry on the same endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_answers_429_with_retry_after() {
    const RAW: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 7\r\ncontent-length: 33\r\n\r\n{\"error\":{\"message\":\"slow down\"}}";
    let up = FaultUpstream::start(Fault::Raw(RAW)).await;
    let r = fault_router("", up.addr, "").await;
    let (status, headers, body) = post(&chat_url(&r), chat("m", "hi", false, 4), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(&body[..], br#"{"error":{"message":"slow down"}}"#);
    assert_eq!(up.request_count(), 1);
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["status_code"], 429);
    assert_eq!(line["error"]["type"], "upstream_response");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// A sim that is killed gives 503 `upstream_unavailable`; started again on the same port, it
/// serves the next request (no stale pooled connection is used).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_dies_and_comes_back() {
    let port = closed_port().port();
    let cfg = || {
        let mut c = sim_config("m");
        c.host = std::net::Ipv4Addr::LOCALHOST.into();
        c.port = port;
        c
    };
    let sim = kthena_sim::spawn(cfg()).await.unwrap();
    let r = fault_router("", sim.addr(), "").await;
    let (status, _, body) = post(&chat_url(&r), chat("m", "hi", false, 4), &[]).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    sim.kill().await;
    let (status, _, body) = post(&chat_url(&r), chat("m", "hi", false, 4), &[]).await;
    assert_openai_error(
        status,
        &body,
        503,
        "service_unavailable_error",
        "upstream_unavailable",
    );
    assert_counters_zero(&r).await;
    let sim = kthena_sim::spawn(cfg()).await.unwrap();
    for (i, stream) in [false, true].into_iter().enumerate() {
        let (status, _, body) = post(&chat_url(&r), chat("m", "hi", stream, 4), &[]).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{i}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let log = r.access_log();
    assert_eq!(log.len(), 4);
    assert_eq!(log[3]["status_code"], 200);
    assert_counters_zero(&r).await;
    sim.kill().await;
    r.router.shutdown().await;
}

/// A streamed chat through a router with `drainTimeout: 300ms` to an engine that stalls
/// after two events: the engine, the router and the client's body (status 200 checked).
async fn stalled_stream_with_a_300ms_drain() -> (FaultUpstream, TestRouter, hyper::body::Incoming) {
    let up = FaultUpstream::start(Fault::StallMidStream { events: 2 }).await;
    let r = fault_router("drainTimeout: 300ms\n", up.addr, "").await;
    let url = format!("{}/v1/chat/completions", r.url());
    let resp = post_stream(&url, chat("m", "hi", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    (up, r, resp.into_body())
}

/// Shutdown with a stream still open past `drainTimeout`: the router closes the connection
/// (the client's stream ends, the engine's connection closes) and logs the request as cut
/// by the router (`drain_timeout`, origin `internal`), not as a client that went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_open_past_the_drain_timeout_is_cut_and_logged_as_the_routers() {
    use http_body_util::BodyExt as _;
    let (mut up, r, mut body) = stalled_stream_with_a_300ms_drain().await;
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"data: "), "{first:?}");
    let TestRouter { dir, router } = r;
    let started = tokio::time::Instant::now();
    router.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    up.expect_disconnect().await;
    // The client's stream ends (no clean end after the cut).
    let rest = tokio::time::timeout(Duration::from_secs(5), body.collect()).await;
    assert!(rest.is_ok(), "the client stream did not end");
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(line["status_code"], 200, "{line}");
    assert_eq!(line["error"]["type"], "drain_timeout", "{line}");
    assert_eq!(line["error_origin"], "internal", "{line}");
}

/// Regression: a stream cut at the drain timeout ended without a word to the client. An
/// SSE client now gets an error event saying why (`drain_timeout`), then the stream breaks
/// (no clean end), as for an engine that fails mid-stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_at_the_drain_timeout_tells_the_client_why() {
    use http_body_util::BodyExt as _;
    let (mut up, r, mut body) = stalled_stream_with_a_300ms_drain().await;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("\n\ndata: ") {
        let frame = body.frame().await.unwrap().unwrap();
        seen.extend_from_slice(&frame.into_data().unwrap());
    }
    let TestRouter { dir: _dir, router } = r;
    let mut ended_with_error = false;
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => seen.extend_from_slice(&f.into_data().unwrap_or_default()),
                Err(_) => {
                    ended_with_error = true;
                    break;
                }
            }
        }
    };
    let (read, ()) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(5), read),
        router.shutdown()
    );
    read.expect("the client stream did not end");
    up.expect_disconnect().await;
    let text = String::from_utf8_lossy(&seen).into_owned();
    let event = last_sse_event(&seen);
    assert_eq!(event["error"]["code"], "drain_timeout", "{event}");
    assert_eq!(event["error"]["type"], "server_error", "{event}");
    assert_eq!(
        event["error"]["message"],
        "the router shut down with the response unfinished (drainTimeout)",
        "{event}"
    );
    assert!(ended_with_error, "the stream ended cleanly: {text:?}");
}

const TOKENS: &[&str] = &[
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\n\n",
    "data: [DONE]\n\n",
];

/// Streams a chat request through the router to an engine sending [`TOKENS`] (then
/// trailers when `trailers`): the router and the request's access-log line, after checking
/// that the client got the whole stream.
async fn stream_tokens(trailers: bool) -> (TestRouter, Upstream, serde_json::Value) {
    let up = Upstream::start(Script::Sse {
        frames: TOKENS,
        trailers,
    })
    .await;
    let r = fault_router("", up.addr, "").await;
    let res = post_stream(&chat_url(&r), chat("m", "hi", true, 8), &[]).await;
    assert_eq!(res.status(), StatusCode::OK);
    let (text, broken) = read_stream(res.into_body()).await;
    assert!(!broken && text.ends_with("data: [DONE]\n\n"), "{text}");
    let line = last_log_line(&r, 1).await;
    assert!(line.get("error").is_none(), "{line}");
    assert_eq!(line["output_tokens"], 3, "{line}");
    (r, up, line)
}

/// Regression: an engine that ends its stream cleanly without the usage chunk the router
/// asked for was counted 0 output tokens, so the output token limit never applied; it is
/// charged one token per event streamed, as a cut stream is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_a_usage_chunk_counts_one_token_per_event() {
    let (r, _up, _) = stream_tokens(false).await;
    let (_, metrics) = get(&format!("http://{}/metrics", r.router.metrics_addr)).await;
    let output = metrics
        .lines()
        .find(|l| {
            l.starts_with("kthena_router_tokens_total{") && l.contains("token_type=\"output\"")
        })
        .unwrap_or_default();
    assert!(output.ends_with(" 3"), "{output}");
    r.router.shutdown().await;
}

/// Regression: an engine answer with HTTP trailers was logged and counted as
/// `client_disconnect` (hyper dropped the body after the trailers without polling it to its
/// end); it is a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_trailers_is_a_success() {
    let (r, _up, line) = stream_tokens(true).await;
    assert_eq!(line["status_code"], 200);
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// Regression: an engine that reports a failure mid-stream with an error event (vLLM's
/// `data: {"error": ...}`) and then ends cleanly was logged and counted as a success; the
/// client still gets the stream as the engine sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_event_mid_stream_is_an_upstream_error() {
    const FRAMES: &[&str] = &[
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"error\": {\"message\": \"engine exploded\", \"type\": \"InternalServerError\", \"code\": 500}}\n\n",
        "data: [DONE]\n\n",
    ];
    let frames = FRAMES;
    let up = Upstream::start(Script::Sse {
        frames,
        trailers: false,
    })
    .await;
    let r = fault_router("", up.addr, "").await;
    let res = post_stream(&chat_url(&r), chat("m", "hi", true, 8), &[]).await;
    let (text, broken) = read_stream(res.into_body()).await;
    assert_eq!((text.as_str(), broken), (frames.concat().as_str(), false));
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["error"]["type"], "upstream_response", "{line}");
    assert_eq!(
        line["error"]["message"],
        "upstream sent an error event: engine exploded"
    );
    assert_eq!(line["error_origin"], "upstream");
    assert_counters_zero(&r).await;
    r.router.shutdown().await;
}

/// Regression: a request still waiting for the engine's answer when `drainTimeout` ran out
/// got no answer at all (an empty reply) and was logged as the client's disconnect (499).
/// It now gets 503 `drain_timeout`, logged as the router's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waiting_for_the_engine_at_the_drain_timeout_gets_503() {
    let mut up = FaultUpstream::start(Fault::StallBeforeHeaders).await;
    let r = fault_router("drainTimeout: 300ms\n", up.addr, "").await;
    let url = chat_url(&r);
    let TestRouter { dir, router } = r;
    let shutdown = async {
        while up.request_count() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        router.shutdown().await;
    };
    let (answer, ()) = tokio::join!(
        tokio::time::timeout(
            Duration::from_secs(10),
            post(&url, chat("m", "hi", false, 4), &[])
        ),
        shutdown
    );
    let (status, _, body) = answer.expect("the router never answered");
    assert_openai_error(
        status,
        &body,
        503,
        "service_unavailable_error",
        "drain_timeout",
    );
    up.expect_disconnect().await;
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(line["status_code"], 503, "{line}");
    assert_eq!(line["error"]["type"], "drain_timeout", "{line}");
    assert_eq!(line["error_origin"], "internal", "{line}");
}

/// The events of a stream with the usage chunk the router asks for.
const TOKENS_AND_USAGE: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\
     data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n\
     data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}\n\n\
     data: [DONE]\n\n";

/// An engine that gzips its answer ([`TOKENS_AND_USAGE`]) when the request's
/// `Accept-Encoding` allows it (or is absent: RFC 9110 §12.5.3, any coding is then
/// acceptable), as the HTTP servers in front of hosted APIs do; the headers of each chat
/// request it got are kept in `seen`.
async fn gzip_engine(
    seen: std::sync::Arc<std::sync::Mutex<Vec<http::HeaderMap>>>,
) -> (std::net::SocketAddr, tokio_util::task::TaskTracker) {
    use std::io::Write as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tasks = tokio_util::task::TaskTracker::new();
    let t2 = tasks.clone();
    tasks.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = std::sync::Arc::clone(&seen);
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let accept = req.headers().get("accept-encoding").cloned();
                    // Only inference requests: the router's scrapes of `/metrics` come too.
                    if req.uri().path() == "/v1/chat/completions" {
                        seen.lock().unwrap().push(req.headers().clone());
                    }
                    async move {
                        let gzip = accept.is_none_or(|v| v.to_str().unwrap_or("").contains("gzip"));
                        let mut resp =
                            http::Response::builder().header("content-type", "text/event-stream");
                        let body = if gzip {
                            resp = resp.header("content-encoding", "gzip");
                            let mut z = flate2::write::GzEncoder::new(
                                Vec::new(),
                                flate2::Compression::default(),
                            );
                            z.write_all(TOKENS_AND_USAGE.as_bytes()).unwrap();
                            bytes::Bytes::from(z.finish().unwrap())
                        } else {
                            bytes::Bytes::from_static(TOKENS_AND_USAGE.as_bytes())
                        };
                        Ok::<_, std::convert::Infallible>(
                            resp.body(http_body_util::Full::new(body)).unwrap(),
                        )
                    }
                });
            t2.spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    (addr, tasks)
}

/// Regression: a client's `Accept-Encoding: gzip` (curl `--compressed`, Python's requests
/// and httpx send it by default) went to the engine, which could then compress the stream:
/// the router could read neither the usage chunk (output tokens counted by event) nor hide
/// the one it had asked for. Engines are now asked for `identity`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_accepting_gzip_gets_its_usage_read_and_hidden() {
    let seen = std::sync::Arc::default();
    let (addr, tasks) = gzip_engine(std::sync::Arc::clone(&seen)).await;
    let r = fault_router("", addr, "").await;
    let headers = [("accept-encoding", "gzip, deflate")];
    let res = post_stream(&chat_url(&r), chat("m", "hi", true, 8), &headers).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().get("content-encoding").is_none(), "{res:?}");
    let (text, broken) = read_stream(res.into_body()).await;
    assert!(!broken && text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(!text.contains("usage"), "{text}");
    assert_eq!(text.matches("data: ").count(), 3, "{text}");
    let line = last_log_line(&r, 1).await;
    assert_eq!(line["output_tokens"], 7, "{line}");
    let asked = seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["accept-encoding"], "identity");
    r.router.shutdown().await;
    tasks.close();
}
