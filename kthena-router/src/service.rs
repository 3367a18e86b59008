//! The inference listener's front service: health, readiness and model list, and for
//! `/v1/*` the request id, the per-request [`Accounting`] and the layered pipeline
//! (`crate::pipeline`: parse → match route → admit → tokenize → schedule → proxy).
//!
//! [`RouterService`] is a `tower::Service<http::Request<Incoming>>`; `server` hands it to
//! hyper. Every failure is answered in one place ([`error_response`]) with the OpenAI error
//! shape.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::accesslog::{AccessLog, Entry};
use crate::accounting::{AccountedBody, Accounting};
use crate::discovery::Snapshot;
use crate::error::Error;
use crate::listener::ListenerConfig;
use crate::metrics::Metrics;
use crate::overload::OverloadConfig;
use crate::pipeline::{BoxHttp, RequestId};
use crate::proxy::{RespBody, full};
use crate::scrape::HttpClient;

/// Default number of ranked endpoints tried when the ModelServer sets no retry policy
/// (Go Kthena tries its top 5).
pub const DEFAULT_ATTEMPTS: usize = 5;

/// State shared by every request.
#[derive(Debug)]
pub struct Shared {
    /// The current routing snapshot, swapped atomically on reload.
    pub snapshot: ArcSwap<Snapshot>,
    /// Upstream HTTP client (pooled connections).
    pub client: HttpClient,
    /// Router metrics.
    pub metrics: Arc<Metrics>,
    /// Access log.
    pub access_log: Arc<AccessLog>,
    /// Largest accepted request body, bytes.
    pub max_body_bytes: usize,
    /// Set once the first scrape pass over every endpoint finished.
    pub ready: AtomicBool,
    /// Set once discovery finished its first full sync (always in standalone mode; in
    /// cluster mode after every reflector listed and the first endpoints were scraped).
    pub synced: AtomicBool,
    /// Listener settings; the body read timeouts apply here.
    pub listener: ListenerConfig,
    /// Longest gap between two body chunks of an engine's answer (`None`: no limit).
    pub upstream_idle_timeout: Option<std::time::Duration>,
    /// Overload protection settings (in-flight caps, circuit breakers).
    pub overload: OverloadConfig,
    /// The admission slots of `overload.maxInFlight` (`None` without a cap).
    pub(crate) admission: Option<Arc<Semaphore>>,
    /// JWT authentication (`None`: off).
    pub(crate) auth: Option<Arc<crate::auth::Authenticator>>,
    /// The token rate limiters of the routes' `rateLimit`s.
    pub(crate) rate_limits: crate::ratelimit::RateLimits,
    /// Gateway API mode's listeners, HTTPRoutes and InferencePools (`None`: mode off).
    pub(crate) gateway: crate::gateway::StateSlot,
    /// The fairness or session-boost queues (unset when both are off).
    pub(crate) queues: std::sync::OnceLock<Arc<crate::queue::Queues>>,
    /// Per-endpoint in-flight counts shared through Redis (unset without `REDIS_HOST`).
    pub(crate) in_flight_share: std::sync::OnceLock<Arc<crate::inflight::SharedInFlight>>,
    rng: Mutex<SmallRng>,
}

impl Shared {
    /// Shared state around a first snapshot.
    #[must_use]
    pub fn new(
        snapshot: Snapshot,
        client: HttpClient,
        metrics: Arc<Metrics>,
        access_log: Arc<AccessLog>,
        max_body_bytes: usize,
    ) -> Self {
        let seed = u64::try_from(
            jiff::Timestamp::now()
                .as_nanosecond()
                .rem_euclid(i128::from(u64::MAX)),
        )
        .unwrap_or(7);
        Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            client,
            metrics,
            access_log,
            max_body_bytes,
            ready: AtomicBool::new(false),
            synced: AtomicBool::new(true),
            listener: ListenerConfig::default(),
            upstream_idle_timeout: None,
            overload: OverloadConfig::default(),
            admission: admission(&OverloadConfig::default()),
            auth: None,
            rate_limits: crate::ratelimit::RateLimits::default(),
            gateway: Arc::default(),
            queues: std::sync::OnceLock::new(),
            in_flight_share: std::sync::OnceLock::new(),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }
}

impl Shared {
    /// Sets the listener settings (body read timeouts; the default otherwise).
    #[must_use]
    pub fn with_listener(mut self, listener: ListenerConfig) -> Self {
        self.listener = listener;
        self
    }

    /// Sets the upstream body idle timeout (`0` = none, the default).
    #[must_use]
    pub fn with_upstream_idle_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.upstream_idle_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// Sets the overload protection settings (the default otherwise).
    #[must_use]
    pub fn with_overload(mut self, overload: OverloadConfig) -> Self {
        self.admission = admission(&overload);
        self.overload = overload;
        self
    }

    /// Turns on JWT authentication of `/v1/*` when `auth.jwksUri` is set (the key set is
    /// fetched by [`crate::auth::Authenticator::run`]).
    #[must_use]
    pub fn with_auth(mut self, auth: &crate::auth::AuthConfig) -> Self {
        self.auth = crate::auth::Authenticator::new(auth);
        self
    }

    /// The random source of weighted route targets.
    pub(crate) fn rng(&self) -> MutexGuard<'_, SmallRng> {
        match self.rng.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

fn admission(cfg: &OverloadConfig) -> Option<Arc<Semaphore>> {
    (cfg.max_in_flight > 0).then(|| Arc::new(Semaphore::new(cfg.max_in_flight)))
}

/// The inference listener's service.
#[derive(Clone)]
pub struct RouterService {
    shared: Arc<Shared>,
    stack: BoxHttp<Incoming>,
}

impl std::fmt::Debug for RouterService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterService").finish_non_exhaustive()
    }
}

impl RouterService {
    /// A service over shared state.
    #[must_use]
    pub fn new(shared: Arc<Shared>) -> Self {
        let stack = crate::pipeline::stack(&shared);
        Self { shared, stack }
    }
}

impl tower::Service<Request<Incoming>> for RouterService {
    type Response = Response<RespBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        let stack = self.stack.clone();
        Box::pin(async move { Ok(handle(shared, stack, req).await) })
    }
}

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<RespBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The OpenAI-shaped error answer for an error. A 408 also closes the connection: the
/// rest of the stalled body is never read; a 405 names the allowed method (`Allow: POST`,
/// or `GET` on `/v1/models`).
#[must_use]
pub fn error_response(e: &Error) -> Response<RespBody> {
    let mut r = json_response(e.status(), e.to_body());
    if matches!(e, Error::BodyTimeout { .. }) {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let Error::MethodNotAllowed { path, .. } = e {
        // RFC 9110 §15.5.6: a 405 must name the allowed method. `/v1/models` is GET only,
        // every other path that answers 405 is POST only.
        let allow = if path == "/v1/models" { "GET" } else { "POST" };
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(after) = e.retry_after() {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs()));
    }
    r
}

async fn handle(
    shared: Arc<Shared>,
    stack: BoxHttp<Incoming>,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::GET, "/healthz") => return json_response(StatusCode::OK, r#"{"message":"ok"}"#),
        (&Method::GET, "/readyz") => {
            return if shared.ready.load(Ordering::Acquire) && shared.synced.load(Ordering::Acquire)
            {
                readyz(&shared)
            } else {
                json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    r#"{"message":"router is not ready"}"#,
                )
            };
        }
        (&Method::GET, "/models") => return list_models(&shared),
        _ => {}
    }
    if !path.starts_with("/v1/") {
        // Only `/v1/*` requests are access-logged (as Go Kthena's middleware does).
        return error_response(&Error::UnknownPath {
            path: path.to_owned(),
        });
    }
    let request_id: Arc<str> = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map_or_else(|| uuid::Uuid::new_v4().to_string().into(), Into::into);
    let acct = Accounting::start(
        Arc::clone(&shared.metrics),
        Arc::clone(&shared.access_log),
        Entry {
            timestamp: crate::accesslog::now_rfc3339(),
            method: req.method().to_string(),
            path: path.to_owned(),
            protocol: format!("{:?}", req.version()),
            request_id: request_id.to_string(),
            ..Entry::default()
        },
    );
    let resp = dispatch(&shared, stack, req, &acct, &request_id).await;
    let (mut parts, body) = match resp {
        Ok(r) => r.into_parts(),
        Err(e) => {
            if matches!(e, Error::BodyTimeout { .. }) {
                shared.metrics.listener.timeout("inference", "body");
            }
            acct.failed(&e);
            error_response(&e).into_parts()
        }
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        parts
            .headers
            .insert(HeaderName::from_static("x-request-id"), v);
    }
    // The accounting settles when the body ends (or is dropped).
    Response::from_parts(parts, AccountedBody::new(body, acct).boxed_unsync())
}

/// The `/v1/*` answers: the model list, the LoRA admin calls, and the inference pipeline.
async fn dispatch(
    shared: &Arc<Shared>,
    stack: BoxHttp<Incoming>,
    mut req: Request<Incoming>,
    acct: &Accounting,
    request_id: &Arc<str>,
) -> Result<Response<RespBody>, Error> {
    if let Some(auth) = &shared.auth {
        let user = auth.authenticate(req.headers())?;
        acct.user(&user);
        req.extensions_mut()
            .insert(crate::auth::UserId(user.into()));
    }
    let path = req.uri().path();
    if path == "/v1/models" {
        if req.method() != Method::GET {
            return Err(Error::MethodNotAllowed {
                method: req.method().to_string(),
                path: path.to_owned(),
            });
        }
        acct.finish(200, None, "", 0);
        return Ok(list_models(shared));
    }
    if let Some(load) = crate::lora::admin_path(path) {
        return crate::lora::admin(shared, req, load, acct).await;
    }
    req.extensions_mut().insert(acct.clone());
    req.extensions_mut()
        .insert(RequestId(Arc::clone(request_id)));
    stack.oneshot(req).await
}

/// 200 once the config is loaded and the first scrape pass is done, also when some models
/// have no ready endpoint (they are listed): a 503 would take this router out of its
/// Service for every model, while another router replica sees the same engines.
fn readyz(shared: &Shared) -> Response<RespBody> {
    let unready = crate::warnings::unready_models(&shared.snapshot.load());
    let body = if unready.is_empty() {
        serde_json::json!({"message": "router is ready"})
    } else {
        serde_json::json!({
            "message": format!("router is ready; {} model(s) have no ready endpoint", unready.len()),
            "modelsWithoutReadyEndpoint": unready,
        })
    };
    json_response(StatusCode::OK, body.to_string())
}

fn list_models(shared: &Shared) -> Response<RespBody> {
    let snap = shared.snapshot.load();
    let data: Vec<serde_json::Value> = snap
        .routes
        .model_names()
        .into_iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "kthena"}))
        .collect();
    json_response(
        StatusCode::OK,
        serde_json::json!({"object": "list", "data": data}).to_string(),
    )
}
