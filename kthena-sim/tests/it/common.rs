//! Shared helpers for the integration tests: a small HTTP client and metric lookups.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on unexpected errors"
)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kthena_sim::Config;
use serde_json::Value;

/// An engine on an ephemeral port serving `tiny-qwen3`, 10 times faster than the model.
pub(crate) fn cfg() -> Config {
    Config::default()
        .with_ephemeral_port()
        .with_model("tiny-qwen3")
        .with_time_scale(10.0)
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub(crate) fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends a request and returns the status and the whole body.
pub(crate) async fn send(method: &str, url: &str, body: Option<&Value>) -> (u16, Bytes) {
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(
            body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string())),
        ))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

pub(crate) async fn post_json(url: &str, body: &Value) -> (u16, Value) {
    let (status, bytes) = send("POST", url, Some(body)).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(crate) async fn get_json(url: &str) -> Value {
    let (status, bytes) = send("GET", url, None).await;
    assert_eq!(status, 200);
    serde_json::from_slice(&bytes).unwrap()
}

pub(crate) async fn get_text(url: &str) -> String {
    let (status, bytes) = send("GET", url, None).await;
    assert_eq!(status, 200);
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Streams a request; returns the `data: ` payloads in order and whether the body ended
/// cleanly (false when the connection was cut).
pub(crate) async fn stream(url: &str, body: &Value) -> (u16, Vec<String>, bool) {
    let req = http::Request::builder()
        .method("POST")
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    let mut clean = true;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Some(d) = f.data_ref() {
                    buf.extend_from_slice(d);
                }
            }
            Err(_) => {
                clean = false;
                break;
            }
        }
    }
    let text = String::from_utf8(buf).unwrap();
    let events = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap().to_owned())
        .collect();
    (status, events, clean)
}

/// Value of the sample `name` (with any labels) in our own `/metrics` output, e.g.
/// `vllm:num_requests_waiting` or `vllm:time_to_first_token_seconds_sum`. The exposition
/// itself is validated with the reference parser in `tests/it/metrics_format.rs`; this only
/// picks one sample line out of text we produced.
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found in\n{text}"))
}

pub(crate) async fn metrics(base: &str) -> String {
    get_text(&format!("{base}/metrics")).await
}
