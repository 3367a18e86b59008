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
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::ServiceExt;

use crate::body::RespBody;
use crate::error::{Error, error_response, json_response};
use crate::pipeline::ctx::RequestId;
use crate::pipeline::{BoxHttp, Inbound, Meta};
use crate::shared::Shared;
use crate::telemetry::accounting::{AccountedBody, Accounting};

/// The inference listener's service.
#[derive(Clone)]
pub struct RouterService {
    shared: Arc<Shared>,
    stack: BoxHttp<Inbound<Incoming>>,
    /// `GET /metrics` answered here too (`exposeMetricsOnRouterPort`).
    metrics: bool,
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
        Self {
            shared,
            stack,
            metrics: false,
        }
    }

    /// Also answers `GET /metrics` (the metrics listener's exposition) when `on`, as Go's
    /// `--expose-metrics-on-router-port`.
    #[must_use]
    pub fn with_metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
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
        if self.metrics && req.method() == Method::GET && req.uri().path() == "/metrics" {
            return Box::pin(std::future::ready(Ok(crate::server::metrics_response(
                &shared,
            ))));
        }
        Box::pin(async move { Ok(handle(shared, stack, req).await) })
    }
}

async fn handle(
    shared: Arc<Shared>,
    stack: BoxHttp<Inbound<Incoming>>,
    mut req: Request<Incoming>,
) -> Response<RespBody> {
    if let Err(e) = check_host(&req) {
        return error_response(&e);
    }
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
        (&Method::GET, "/models") => {
            // The same answer as `/v1/models`, behind the same authentication.
            return match authenticate(&shared, req.headers()).await {
                Ok(_) => list_models(&shared),
                Err(e) => error_response(&e),
            };
        }
        _ => {}
    }
    // In Gateway API mode an HTTPRoute of the request's listener may serve any path (its
    // `URLRewrite` gives the path the body is parsed as); otherwise only `/v1/*`.
    let effective = crate::pipeline::effective_path(&shared, &req);
    if !path.starts_with("/v1/") && effective.is_none() {
        // Only `/v1/*` requests are access-logged (as Go Kthena's middleware does).
        return error_response(&Error::UnknownPath {
            path: path.to_owned(),
        });
    }
    if let Some(p) = effective {
        req.extensions_mut().insert(p);
    }
    let path = req.uri().path();
    let request_id = RequestId::from_headers(req.headers());
    let entry = shared.access_log.request_entry(
        path.to_owned(),
        req.method().as_str(),
        || format!("{:?}", req.version()),
        &request_id,
    );
    let acct = Accounting::start(
        Arc::clone(&shared.metrics),
        Arc::clone(&shared.access_log),
        entry,
        Arc::clone(&request_id),
    );
    let resp = until_drain_cut(&shared, dispatch(&shared, stack, req, &acct, &request_id)).await;
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

/// `answer`, or [`Error::DrainCut`] once the router's drain timeout has run out with it
/// still pending (queued, or waiting for an engine's answer head). A connection cut at the
/// drain timeout is polled once more (`listener`, `CUT_GRACE`), so this needs no waker of
/// its own: the check is one atomic load per poll. `answer` is dropped with the returned
/// future, closing its engine connection.
async fn until_drain_cut<F>(shared: &Shared, answer: F) -> Result<Response<RespBody>, Error>
where
    F: Future<Output = Result<Response<RespBody>, Error>>,
{
    let mut answer = std::pin::pin!(answer);
    std::future::poll_fn(|cx| match answer.as_mut().poll(cx) {
        Poll::Pending if shared.drain_cut.is_cancelled() => Poll::Ready(Err(Error::DrainCut)),
        other => other,
    })
    .await
}

/// The headers that carry a client's credentials (OpenAI-style bearer tokens,
/// Anthropic-style `x-api-key`, cookies): removed before a request is forwarded unless
/// `auth.forwardAuthorization` is set. External providers get their own credential.
const CLIENT_CREDENTIALS: [http::HeaderName; 3] = [
    http::header::AUTHORIZATION,
    http::HeaderName::from_static("x-api-key"),
    http::header::COOKIE,
];

/// The `/v1/*` answers: the model list, the LoRA admin calls, and the inference pipeline.
async fn dispatch(
    shared: &Arc<Shared>,
    stack: BoxHttp<Inbound<Incoming>>,
    mut req: Request<Incoming>,
    acct: &Accounting,
    request_id: &Arc<str>,
) -> Result<Response<RespBody>, Error> {
    let caller = authenticate(shared, req.headers()).await?;
    if let Some(who) = &caller {
        acct.user(&who.sub);
    }
    if !shared.auth_cfg.forward_authorization {
        // The client's credentials are for the router, not for the engines.
        for name in CLIENT_CREDENTIALS {
            req.headers_mut().remove(name);
        }
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
        crate::lora::may_administer(&shared.auth_cfg, shared.auth.is_some(), caller.as_ref())?;
        return crate::lora::admin(shared, req, load, acct).await;
    }
    let meta = Meta {
        acct: acct.clone(),
        id: RequestId(Arc::clone(request_id)),
        user: caller.map(|who| crate::auth::UserId(who.sub.as_str().into())),
        pick_only: false,
    };
    stack.oneshot(req.map(|body| Inbound { body, meta })).await
}

/// The caller of a request when authentication is on (`None` when off).
///
/// # Errors
/// [`Error::InvalidHeader`] for more than one `Authorization` header (which one would be
/// checked and which forwarded is ambiguous), else the authenticator's errors.
async fn authenticate(
    shared: &Shared,
    headers: &http::HeaderMap,
) -> Result<Option<crate::auth::Principal>, Error> {
    if headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .nth(1)
        .is_some()
    {
        return Err(Error::InvalidHeader {
            name: "Authorization",
            reason: "more than one",
        });
    }
    match &shared.auth {
        Some(auth) => auth.authenticate(headers).await.map(Some),
        None => Ok(None),
    }
}

/// An HTTP/1.1 request needs exactly one `Host` header (RFC 9112 section 3.2: a server
/// answers 400 to one without, with several, or with an invalid value); in any version,
/// two `Host` headers or a list in one (`Host: a, b`) are refused, since host matching must
/// not depend on which one a proxy in front read. An empty value is allowed (RFC 9112 for a
/// target without authority); HTTP/1.0 and HTTP/2 (`:authority`) may go without.
fn check_host<B>(req: &Request<B>) -> Result<(), Error> {
    let invalid = |reason| Error::InvalidHeader {
        name: "Host",
        reason,
    };
    let mut hosts = req.headers().get_all(http::header::HOST).iter();
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err(invalid("more than one"));
    }
    match first {
        None if req.version() == http::Version::HTTP_11 => {
            Err(invalid("missing (an HTTP/1.1 request needs one)"))
        }
        None => Ok(()),
        Some(v) if v.as_bytes().contains(&b',') => Err(invalid("more than one")),
        Some(v) if !v.is_empty() && http::uri::Authority::try_from(v.as_bytes()).is_err() => {
            Err(invalid("not a host[:port]"))
        }
        Some(_) => Ok(()),
    }
}

/// 200 once the config is loaded and the first scrape pass is done, also when some models
/// have no ready endpoint (they are listed): a 503 would take this router out of its
/// Service for every model, while another router replica sees the same engines.
fn readyz(shared: &Shared) -> Response<RespBody> {
    let unready = crate::discovery::unready_models(&shared.snapshot.load());
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
