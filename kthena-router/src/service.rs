//! The inference service: parse → match route → schedule → proxy with retries.
//!
//! [`RouterService`] is a `tower::Service<http::Request<Incoming>>`; `server` hands it to
//! hyper. Every failure is answered in one place ([`error_response`]) with the OpenAI error
//! shape.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use kthena_sched::Request as SchedRequest;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::time::Instant;

use crate::accesslog::{AccessLog, Entry};
use crate::discovery::Snapshot;
use crate::error::Error;
use crate::listener::ListenerConfig;
use crate::metrics::{Destination, Metrics};
use crate::openai::{ParsedRequest, estimate_tokens, parse_request};
use crate::proxy::{ProxyBody, RequestCtx, RespBody, SchedDone, full};
use crate::route::{MatchError, TargetRef};
use crate::scrape::HttpClient;

/// Default number of ranked endpoints tried when the ModelServer sets no retry policy
/// (Go Kthena tries its top 5).
pub const DEFAULT_ATTEMPTS: usize = 5;

/// Largest upstream error body kept to pass on after the last attempt, in bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

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
}

/// The inference listener's service.
#[derive(Debug, Clone)]
pub struct RouterService {
    shared: Arc<Shared>,
}

impl RouterService {
    /// A service over shared state.
    #[must_use]
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
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
        Box::pin(async move { Ok(handle(shared, req).await) })
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
/// rest of the stalled body is never read.
#[must_use]
pub fn error_response(e: &Error) -> Response<RespBody> {
    let mut r = json_response(e.status(), e.to_body());
    if matches!(e, Error::BodyTimeout { .. }) {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<RespBody> {
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
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
        return error_response(&Error::UnknownPath { path });
    }
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    let entry = Entry {
        timestamp: crate::accesslog::now_rfc3339(),
        method: req.method().to_string(),
        path: path.clone(),
        protocol: format!("{:?}", req.version()),
        request_id: request_id.clone(),
        ..Entry::default()
    };
    let mut ctx = RequestCtx::new(
        Arc::clone(&shared.metrics),
        Arc::clone(&shared.access_log),
        entry,
    );
    let lora_admin = crate::lora::admin_path(&path);
    let mut resp = if req.method() == Method::GET && path == "/v1/models" {
        ctx.settle(200, None, "", 0);
        list_models(&shared)
    } else {
        let res = match lora_admin {
            Some(load) => crate::lora::admin(&shared, req, load, &mut ctx).await,
            None => serve(&shared, req, &mut ctx, &path, &request_id).await,
        };
        match res {
            Ok(r) => r,
            Err(e) => {
                if matches!(e, Error::BodyTimeout { .. }) {
                    shared.metrics.listener.timeout("inference", "body");
                }
                ctx.settle(
                    e.status().as_u16(),
                    Some((e.finish_reason(), e.to_string())),
                    e.origin(),
                    0,
                );
                error_response(&e)
            }
        }
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut()
            .insert(HeaderName::from_static("x-request-id"), v);
    }
    resp
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

/// Reads the whole body: at most `limit` bytes (413 beyond), no gap between two reads longer
/// than the idle timeout and no more than the total timeout for all of it (408).
async fn read_body(
    req: Request<Incoming>,
    limit: usize,
    l: &ListenerConfig,
) -> Result<(http::request::Parts, Bytes), Error> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Error::BodyTooLarge { limit });
    }
    let deadline = Instant::now() + l.body_read_timeout;
    let mut body = Limited::new(body, limit);
    let mut buf =
        bytes::BytesMut::with_capacity(declared.map_or(0, |n| usize::try_from(n).unwrap_or(0)));
    loop {
        let idle_end = Instant::now() + l.body_read_idle_timeout;
        let (end, idle) = if idle_end < deadline {
            (idle_end, true)
        } else {
            (deadline, false)
        };
        let Ok(frame) = tokio::time::timeout_at(end, body.frame()).await else {
            let timeout = if idle {
                l.body_read_idle_timeout
            } else {
                l.body_read_timeout
            };
            return Err(Error::BodyTimeout { idle, timeout });
        };
        match frame {
            None => return Ok((parts, buf.freeze())),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Err(Error::BodyTooLarge { limit });
            }
            Some(Err(e)) => {
                return Err(Error::BodyRead {
                    reason: e.to_string(),
                });
            }
        }
    }
}

async fn serve(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    ctx: &mut RequestCtx,
    path: &str,
    request_id: &str,
) -> Result<Response<RespBody>, Error> {
    if !matches!(
        path,
        "/v1/chat/completions" | "/v1/completions" | "/v1/responses"
    ) {
        return Err(Error::UnknownPath {
            path: path.to_owned(),
        });
    }
    if req.method() != Method::POST {
        return Err(Error::MethodNotAllowed {
            method: req.method().to_string(),
            path: path.to_owned(),
        });
    }
    let (parts, raw) = read_body(req, shared.max_body_bytes, &shared.listener).await?;
    let parsed = parse_request(raw)?;
    let snap = shared.snapshot.load_full();
    ctx.record_metrics = true;
    ctx.entry.model_name = parsed.model.clone();
    ctx.entry.input_tokens = estimate_tokens(&parsed.prompt_text);
    if snap.routes.knows(&parsed.model) {
        ctx.model_label = parsed.model.clone();
    }
    ctx.set_downstream(&ctx.model_label.clone());

    let m = {
        let mut rng = match shared.rng.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        snap.routes
            .match_request(&parsed.model, &parts.headers, path, &mut *rng)
    };
    let m = match m {
        Ok(m) => m,
        Err(MatchError::UnknownModel) => {
            return Err(Error::ModelNotFound {
                model: parsed.model.clone(),
            });
        }
        Err(MatchError::NoRule) => {
            return Err(Error::NoRuleMatched {
                model: parsed.model.clone(),
            });
        }
    };
    ctx.dest.model_route = m.route.key();
    ctx.entry.model_route = m.route.key();
    let server_name = match &m.target {
        TargetRef::ModelServer(s) => s.clone(),
        TargetRef::ExternalProvider(p) => {
            return Err(Error::ServerNotFound {
                server: format!(
                    "{}/{p} (ExternalModelProvider targets are not served in standalone mode)",
                    m.route.namespace
                ),
            });
        }
    };
    let server_key = format!("{}/{server_name}", m.route.namespace);
    let Some(server) = snap.servers.get(&server_key).cloned() else {
        return Err(Error::ServerNotFound { server: server_key });
    };
    let upstream_model = if m.is_lora {
        parsed.model.clone()
    } else {
        server.model.clone().unwrap_or_else(|| parsed.model.clone())
    };
    ctx.dest = Destination {
        model_route: m.route.key(),
        backend_type: "model_server".into(),
        backend_name: server.key.clone(),
        upstream_model: upstream_model.clone(),
    };
    ctx.entry.model_server = server.key.clone();
    ctx.entry.backend_type = "model_server".into();
    ctx.entry.backend_name = server.key.clone();
    ctx.entry.upstream_model = upstream_model.clone();

    // LoRA requests only go to endpoints that list the adapter; base requests to all.
    let lora = m.is_lora.then(|| parsed.model.clone());
    let pool = crate::lora::candidates(&server, lora.as_deref())?;
    let cands: Vec<kthena_sched::Candidate> = pool.iter().map(|e| e.candidate()).collect();
    let token_ids = snap
        .kv
        .request_tokens(
            shared,
            server.engine.as_str(),
            &parsed.model,
            &upstream_model,
            &parsed.prompt,
            pool.first().map(|e| e.base_url()).as_deref(),
        )
        .await;
    if let Some(t) = &token_ids {
        ctx.entry.input_tokens = t.len() as u64;
    }
    let mut sreq = SchedRequest::new(&parsed.model).with_prompt(&parsed.prompt_text);
    if let Some(t) = &token_ids {
        sreq = sreq.with_token_ids(t);
    }
    if let Some(l) = &lora {
        sreq = sreq.with_lora(l);
    }
    if let Some(u) = &parsed.user {
        sreq = sreq.with_session(u);
    }
    let decision = snap
        .scheduler
        .schedule(&sreq, &cands)
        .map_err(|e| Error::Scheduling {
            server: server.key.clone(),
            reason: e.to_string(),
        })?;
    shared
        .metrics
        .plugins
        .plugin_timings(&parsed.model, &decision.plugin_timings);
    for (plugin, ratio) in &decision.match_ratios {
        shared.metrics.match_ratio(plugin, &parsed.model, *ratio);
    }
    let ranked: Vec<usize> = decision.ranked.iter().map(|r| r.index).collect();

    let rewrite = (!m.is_lora).then_some(server.model.as_deref()).flatten();
    let body = if path == "/v1/responses" {
        parsed.upstream_responses_body(rewrite)
    } else {
        parsed.upstream_body(rewrite)
    };
    let headers = upstream_headers(&parts.headers, request_id);
    let pq = parts
        .uri
        .path_and_query()
        .map_or(path, |p| p.as_str())
        .to_owned();

    let (attempts, pause) = match server.retry {
        Some((n, pause)) => (n, pause),
        None => (DEFAULT_ATTEMPTS.min(ranked.len()), Duration::ZERO),
    };
    ctx.upstream_start = Some(Instant::now());
    let mut last_fail: Option<String> = None;
    let mut last_resp: Option<(http::response::Parts, Bytes)> = None;
    for attempt in 0..attempts {
        if attempt > 0 && !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let idx = ranked[attempt % ranked.len()];
        let ep = &pool[idx];
        if let Some(a) = &lora
            && !ep.has_lora(a)
        {
            // Found without the adapter by an earlier attempt of this request.
            continue;
        }
        ctx.entry.selected_pod = ep.name.clone();
        ctx.entry.upstream_attempts = attempt + 1;
        let guard = ep.begin_request(snap.scheduler.prefill_tokens(&sreq, &cands[idx]));
        // Cache-affinity plugins learn the decision now, while the engine prefills, so that
        // the next request with the same new prefix follows this one (Go Kthena's
        // PostSchedule runs only after a successful answer).
        snap.scheduler.on_scheduled(&sreq, &cands[idx]);
        ctx.set_upstream_active(true);
        let uri = format!("{}{pq}", ep.base_url());
        let mut up = Request::builder().method(Method::POST).uri(&uri);
        if let Some(h) = up.headers_mut() {
            *h = headers.clone();
        }
        let up = up
            .body(Full::new(body.bytes.clone()))
            .map_err(|e| Error::BodyRead {
                reason: e.to_string(),
            })?;
        let fut = shared.client.request(up);
        let res = match server.timeout {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r,
                Err(_) => {
                    ctx.upstream_end = Some(Instant::now());
                    return Err(Error::UpstreamTimeout {
                        endpoint: ep.name.clone(),
                        timeout: t,
                    });
                }
            },
            None => fut.await,
        };
        match res {
            Err(e) => {
                ctx.set_upstream_active(false);
                drop(guard);
                tracing::debug!(endpoint = %ep.name, attempt, error = ?e, "Upstream attempt failed; trying the next endpoint");
                last_fail = Some(format!("{}: {e:?}", ep.name));
                last_resp = None;
            }
            Ok(resp) => {
                let status = resp.status();
                ctx.entry.upstream_status_code = status.as_u16();
                // An adapter request answered "model does not exist" is retried on another
                // endpoint that lists the adapter (the list was stale).
                let lora_404 = lora.is_some() && status == StatusCode::NOT_FOUND;
                if lora_404 || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                    let (p, b) = resp.into_parts();
                    let bytes = Limited::new(b, MAX_ERROR_BODY)
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    ctx.set_upstream_active(false);
                    drop(guard);
                    last_fail = Some(format!("{} answered {status}", ep.name));
                    last_resp = Some((p, bytes));
                    if lora_404 {
                        let Some(a) = lora.as_deref().filter(|_| {
                            last_resp
                                .as_ref()
                                .is_some_and(|(_, b)| crate::lora::is_missing_model(b))
                        }) else {
                            break;
                        };
                        ep.set_lora(a, false);
                        if !pool.iter().any(|e| e.has_lora(a)) {
                            break;
                        }
                    }
                    continue;
                }
                ctx.upstream_end = Some(Instant::now());
                if status.is_success() {
                    ctx.sched = Some(SchedDone {
                        scheduler: Arc::clone(&snap.scheduler),
                        model: parsed.model.clone(),
                        lora: lora.clone(),
                        prompt: parsed.prompt_text.clone(),
                        endpoint: Arc::clone(ep),
                    });
                }
                return Ok(stream_response(
                    resp,
                    ctx,
                    guard,
                    &parsed,
                    body.injected_usage,
                ));
            }
        }
    }
    ctx.upstream_end = Some(Instant::now());
    if let Some((p, b)) = last_resp {
        // The last answer was 429/5xx (or an adapter 404): hand it to the client unchanged.
        let status = p.status;
        ctx.settle(
            status.as_u16(),
            Some(("upstream_response", last_fail.unwrap_or_default())),
            "upstream",
            0,
        );
        let mut r = Response::from_parts(p, full(b));
        strip_hop_by_hop(r.headers_mut());
        return Ok(r);
    }
    Err(Error::AllUpstreamsFailed {
        server: server.key.clone(),
        attempts,
        last: last_fail.unwrap_or_default(),
    })
}

fn stream_response(
    resp: Response<Incoming>,
    ctx: &mut RequestCtx,
    guard: crate::endpoint::InFlightGuard,
    parsed: &ParsedRequest,
    injected_usage: bool,
) -> Response<RespBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.starts_with("text/event-stream") || v.starts_with("application/x-ndjson")
        });
    if parsed.stream || sse {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    let status = parts.status.as_u16();
    // Move the accounting into the body: it settles when the body ends or is dropped.
    let owned = ctx.detach();
    let body = ProxyBody::new(
        body,
        owned,
        guard,
        status,
        sse,
        injected_usage && !parsed.client_wants_usage,
    );
    Response::from_parts(parts, http_body_util::BodyExt::boxed_unsync(body))
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for n in HOP_BY_HOP {
        h.remove(n);
    }
    for n in listed {
        h.remove(n.as_str());
    }
}

fn upstream_headers(client: &HeaderMap, request_id: &str) -> HeaderMap {
    let mut h = client.clone();
    strip_hop_by_hop(&mut h);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    // The router has read the whole body already; the engine must not wait for a
    // `100 Continue` exchange.
    h.remove(header::EXPECT);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(HeaderName::from_static("x-request-id"), v);
    }
    h
}
