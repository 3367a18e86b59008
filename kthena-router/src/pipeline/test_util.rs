//! Helpers of the stage unit tests: shared state around one route `m` → ModelServer
//! `default/ms` (`spec.model: served-m`), requests, and a recording inner service.
#![allow(clippy::unwrap_used, reason = "test helpers")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::Full;
use kthena_openai::{Api, parse_request_for};
use tower::{Layer, ServiceExt};

use super::RouteLayer;
use super::ctx::{Ctx, Inbound, Meta, Parsed, RequestId, Routed};
use crate::body::{HeldBody, RespBody, full};
use crate::config::{AccessLogConfig, Config, EndpointConfig};
use crate::error::Error;
use crate::shared::Shared;
use crate::telemetry::accesslog::{AccessLog, Entry};
use crate::telemetry::accounting::Accounting;
use crate::telemetry::metrics::Metrics;
use crate::upstream::endpoint::Endpoint;
use crate::upstream::overload::OverloadConfig;

/// Shared state with default overload settings and endpoints `e0..` at `addrs`.
pub(crate) fn shared(addrs: &[&str]) -> (Arc<Shared>, Vec<Arc<Endpoint>>) {
    shared_with(addrs, OverloadConfig::default())
}

/// A snapshot of route `m` → ModelServer `default/ms` (`spec.model: served-m`, selecting
/// `app: a`) with endpoints `e0..` at `addrs`.
pub(crate) fn snapshot(addrs: &[&str]) -> crate::discovery::Snapshot {
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
            incarnation: None,
            container_started: None,
        })
        .collect();
    crate::discovery::Loader::new()
        .load_cluster(
            &Config::default(),
            vec![serde_saphyr::from_str(route).unwrap()],
            vec![serde_saphyr::from_str(server).unwrap()],
            endpoints,
        )
        .unwrap()
}

/// Shared state with `overload` settings and endpoints `e0..` at `addrs`.
pub(crate) fn shared_with(
    addrs: &[&str],
    overload: OverloadConfig,
) -> (Arc<Shared>, Vec<Arc<Endpoint>>) {
    let snap = snapshot(addrs);
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

/// A recording inner service that answers 200 with an empty body and keeps the state of
/// the request it saw.
#[allow(clippy::type_complexity, reason = "test helper")]
pub(crate) fn recorder<T: Send + 'static>() -> (
    Arc<Mutex<Option<T>>>,
    impl tower::Service<Request<T>, Response = Response<RespBody>, Error = Error, Future = impl Send>
    + Clone
    + Send
    + 'static,
) {
    let seen = Arc::new(Mutex::new(None));
    let s2 = Arc::clone(&seen);
    let svc = tower::service_fn(move |req: Request<T>| {
        *s2.lock().unwrap() = Some(req.into_body());
        async { Ok::<_, Error>(Response::new(full(""))) }
    });
    (seen, svc)
}

/// What the front service knows of a test request, with `acct`.
pub(crate) fn meta(acct: Accounting) -> Meta {
    Meta {
        acct,
        id: RequestId("test".into()),
        user: None,
        pick_only: false,
    }
}

/// `POST path` with `body`, as the front service hands it to the stack.
pub(crate) fn request(shared: &Shared, path: &str, body: &str) -> Request<Inbound<Full<Bytes>>> {
    request_with(shared, Method::POST, path, body)
}

/// `method path` with `body`, as the front service hands it to the stack.
pub(crate) fn request_with(
    shared: &Shared,
    method: Method,
    path: &str,
    body: &str,
) -> Request<Inbound<Full<Bytes>>> {
    let inbound = Inbound {
        body: Full::new(Bytes::from(body.to_owned())),
        meta: meta(accounting(shared)),
    };
    Request::builder()
        .method(method)
        .uri(path)
        .body(inbound)
        .unwrap()
}

/// A request as the parse stage leaves it, carrying `acct`.
pub(crate) fn parsed_with(
    shared: &Shared,
    path: &str,
    body: &str,
    acct: Accounting,
) -> Request<Ctx<()>> {
    let parsed = Parsed {
        req: Arc::new(
            parse_request_for(Bytes::from(body.to_owned()), Api::of_path(path).unwrap()).unwrap(),
        ),
        snap: shared.snapshot.load_full(),
    };
    let ctx = Ctx {
        meta: meta(acct),
        parsed,
        held: HeldBody(Arc::new(shared.body_budget.reservation())),
        tail: None,
        at: (),
    };
    Request::builder().uri(path).body(ctx).unwrap()
}

/// A request as the parse stage leaves it.
pub(crate) fn parsed(shared: &Shared, path: &str, body: &str) -> Request<Ctx<()>> {
    parsed_with(shared, path, body, accounting(shared))
}

/// A request for model `m` as the route stage leaves it, carrying `acct`.
pub(crate) async fn routed(shared: &Arc<Shared>, acct: Accounting) -> Request<Ctx<Routed>> {
    routed_with(shared, r#"{"model":"m","prompt":"hi"}"#, acct).await
}

/// A `/v1/completions` request with `body` as the route stage leaves it, carrying `acct`.
pub(crate) async fn routed_with(
    shared: &Arc<Shared>,
    body: &str,
    acct: Accounting,
) -> Request<Ctx<Routed>> {
    let (seen, inner) = recorder::<Ctx<Routed>>();
    RouteLayer::new(Arc::clone(shared))
        .layer(inner)
        .oneshot(parsed(shared, "/v1/completions", body))
        .await
        .unwrap();
    let routed = seen.lock().unwrap().take().unwrap().at;
    let req = parsed_with(shared, "/v1/completions", body, acct);
    req.map(|c| c.with(routed))
}
