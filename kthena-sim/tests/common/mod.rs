//! Shared helpers for the integration tests: a small HTTP client and metric lookups.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on unexpected errors"
)]
#![allow(dead_code, reason = "each test binary uses a subset of the helpers")]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

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

/// Value of the (last) sample named `name` in a Prometheus text exposition; histogram sums
/// and counts are addressed as `<name>_sum` / `<name>_count`.
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let mut found = None;
    for s in &scrape.samples {
        let v = match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(*v),
            prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => None,
        };
        if s.metric == name {
            found = v.or(found);
        }
        if let prometheus_parse::Value::Histogram(h) = &s.value {
            let _ = h;
        }
    }
    if let Some(v) = found {
        return v;
    }
    // Histogram sum/count lines.
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(name)
            && (rest.starts_with('{') || rest.starts_with(' '))
        {
            let v = line.rsplit(' ').next().unwrap();
            return v.parse().unwrap();
        }
    }
    panic!("metric {name} not found in\n{text}");
}

pub(crate) async fn metrics(base: &str) -> String {
    get_text(&format!("{base}/metrics")).await
}
