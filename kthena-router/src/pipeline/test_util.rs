//! Helpers of the stage unit tests: shared state around one route `m` → ModelServer
//! `default/ms` (`spec.model: served-m`), requests, and a recording inner service.
#![allow(clippy::unwrap_used, reason = "test helpers")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::Full;
use kthena_openai::{parse_request_at, prompt_member};
use tower::{Layer, ServiceExt};

use super::{Parsed, RequestId, RouteLayer, Routed, Scheduled, Tokens};
use crate::accesslog::{AccessLog, Entry};
use crate::accounting::Accounting;
use crate::body::{RespBody, full};
use crate::config::{AccessLogConfig, Config, EndpointConfig};
use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::overload::OverloadConfig;
use crate::shared::Shared;

/// What the recording service saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) parsed: Option<Parsed>,
    pub(crate) routed: Option<Routed>,
    pub(crate) tokens: Option<Tokens>,
    pub(crate) scheduled: Option<Scheduled>,
}

/// Shared state with default overload settings and endpoints `e0..` at `addrs`.
pub(crate) fn shared(addrs: &[&str]) -> (Arc<Shared>, Vec<Arc<Endpoint>>) {
    shared_with(addrs, OverloadConfig::default())
}

/// Shared state with `overload` settings and endpoints `e0..` at `addrs`.
pub(crate) fn shared_with(
    addrs: &[&str],
    overload: OverloadConfig,
) -> (Arc<Shared>, Vec<Arc<Endpoint>>) {
    let route = "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelRoute\nmetadata: {name: r, namespace: default}\nspec:\n  modelName: m\n  rules:\n  - targetModels: [{modelServerName: ms}]\n";
    let server = "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelServer\nmetadata: {name: ms, namespace: default}\nspec:\n  model: served-m\n  inferenceEngine: vLLM\n  workloadSelector: {matchLabels: {app: a}}\n  workloadPort: {port: 8000}\n";
    let endpoints = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| EndpointConfig {
            name: format!("e{i}"),
            address: (*a).to_owned(),
            namespace: "default".into(),
            labels: BTreeMap::from([("app".to_owned(), "a".to_owned())]),
            kv_events: None,
            kv_events_replay: None,
        })
        .collect();
    let snap = crate::discovery::Loader::new()
        .load_cluster(
            &Config::default(),
            vec![serde_saphyr::from_str(route).unwrap()],
            vec![serde_saphyr::from_str(server).unwrap()],
            endpoints,
        )
        .unwrap();
    let eps = snap
        .servers
        .get("default/ms")
        .map(|s| s.endpoints.clone())
        .unwrap_or_default();
    let access_log = AccessLog::open(
        &AccessLogConfig {
            enabled: false,
            ..AccessLogConfig::default()
        },
        prometheus_client::metrics::counter::Counter::default(),
    )
    .unwrap();
    let shared = Shared::new(
        snap,
        crate::server::http_client(),
        Arc::new(Metrics::new()),
        Arc::new(access_log),
        1024 * 1024,
    )
    .with_overload(overload);
    (Arc::new(shared), eps)
}

/// A fresh request accounting on `shared`.
pub(crate) fn accounting(shared: &Shared) -> Accounting {
    Accounting::start(
        Arc::clone(&shared.metrics),
        Arc::clone(&shared.access_log),
        Entry::default(),
        std::sync::Arc::from("test-request"),
    )
}

/// A recording inner service that answers 200 with an empty body.
#[allow(clippy::type_complexity, reason = "test helper")]
pub(crate) fn recorder() -> (
    Arc<Mutex<Option<Seen>>>,
    impl tower::Service<Request<()>, Response = Response<RespBody>, Error = Error, Future = impl Send>
    + Clone
    + Send
    + 'static,
) {
    let seen = Arc::new(Mutex::new(None));
    let s2 = Arc::clone(&seen);
    let svc = tower::service_fn(move |req: Request<()>| {
        let x = req.extensions();
        *s2.lock().unwrap() = Some(Seen {
            parsed: x.get().cloned(),
            routed: x.get().cloned(),
            tokens: x.get().cloned(),
            scheduled: x.get().cloned(),
        });
        async { Ok::<_, Error>(Response::new(full(""))) }
    });
    (seen, svc)
}

/// `POST path` with `body`.
pub(crate) fn request(path: &str, body: &str) -> Request<Full<Bytes>> {
    request_with(Method::POST, path, body)
}

/// `method path` with `body`.
pub(crate) fn request_with(method: Method, path: &str, body: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// A body-less request as the parse stage leaves it.
pub(crate) fn parsed(shared: &Shared, path: &str, body: &str) -> Request<()> {
    let mut req = Request::builder().uri(path).body(()).unwrap();
    req.extensions_mut().insert(Parsed {
        req: Arc::new(parse_request_at(Bytes::from(body.to_owned()), prompt_member(path)).unwrap()),
        snap: shared.snapshot.load_full(),
    });
    req.extensions_mut().insert(RequestId("test".into()));
    req
}

/// A request for model `m` as the route stage leaves it, carrying `acct`.
pub(crate) async fn routed(shared: &Arc<Shared>, acct: Accounting) -> Request<()> {
    let mut req = parsed(shared, "/v1/completions", r#"{"model":"m","prompt":"hi"}"#);
    let (seen, inner) = recorder();
    RouteLayer::new(Arc::clone(shared))
        .layer(inner)
        .oneshot(parsed(
            shared,
            "/v1/completions",
            r#"{"model":"m","prompt":"hi"}"#,
        ))
        .await
        .unwrap();
    let routed = seen.lock().unwrap().take().unwrap().routed.unwrap();
    req.extensions_mut().insert(routed);
    req.extensions_mut().insert(acct);
    req
}
