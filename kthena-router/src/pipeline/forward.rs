//! Proxy with retries, the innermost service: sends the identical body to the ranked
//! endpoints in turn, retrying on connect errors, 429 and 5xx before the first response
//! byte (and on an adapter 404 from a stale adapter list), feeds each endpoint's circuit
//! breaker, and streams the chosen answer through a [`ProxyBody`].

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use kthena_openai::{ParsedRequest, UpstreamBody};
use kthena_sched::LoadGuard;
use tokio::time::Instant;

use super::schedule::sched_request;
use super::{BoxFut, Parsed, Prefetched, RequestId, Routed, Scheduled, Tokens, ext};
use crate::accounting::{Accounting, SchedDone};
use crate::body::{RespBody, full};
use crate::config::DEFAULT_ATTEMPTS;
use crate::endpoint::Endpoint;
use crate::error::{Error, error_chain};
use crate::overload::BreakerState;
use crate::proxy::ProxyBody;
use crate::shared::Shared;
use crate::upstream::{self, SendError, UpBody};

/// Largest upstream error body kept to pass on after the last attempt, in bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends the request upstream (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Forward {
    shared: Arc<Shared>,
}

impl Forward {
    /// The service over the router's shared state.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl tower::Service<Request<()>> for Forward {
    type Response = Response<RespBody>;
    type Error = Error;
    type Future = BoxFut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> BoxFut {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            if req
                .extensions()
                .get::<crate::pd::pairs::PdScheduled>()
                .is_some()
            {
                // Boxed on its own: this future is boxed per request, and moving it
                // should not copy the prefill-decode flow's state (some KiB) each time.
                return Box::pin(crate::pd::flow::forward(shared, req)).await;
            }
            Plan::new(shared, &req)?.run().await
        })
    }
}

/// One request's upstream plan: what every attempt sends and where.
struct Plan {
    shared: Arc<Shared>,
    acct: Accounting,
    parsed: Parsed,
    routed: Routed,
    tokens: Tokens,
    prefetched: Prefetched,
    sched: Scheduled,
    body: UpstreamBody,
    headers: HeaderMap,
    path_and_query: String,
}

/// What one attempt came to.
enum Step {
    /// The answer to stream to the client.
    Answer(Response<RespBody>),
    /// The endpoint was not tried (adapter gone, breaker open).
    Skip,
    /// The attempt failed: why, the error answer kept, and whether to stop retrying.
    Failed {
        why: String,
        resp: Option<(http::response::Parts, Bytes)>,
        stop: bool,
    },
}

impl Plan {
    fn new(shared: Arc<Shared>, req: &Request<()>) -> Result<Self, Error> {
        let parsed = ext::<Parsed>(req, "parsed request")?;
        let routed = ext::<Routed>(req, "route match")?;
        let path = req.uri().path();
        let body = routed.upstream_body(&parsed.req, path);
        let request_id = ext::<RequestId>(req, "request id")?;
        Ok(Self {
            acct: ext::<Accounting>(req, "accounting")?,
            tokens: ext::<Tokens>(req, "token ids")?,
            prefetched: Prefetched::of(req),
            sched: ext::<Scheduled>(req, "scheduling decision")?,
            headers: upstream_headers(req.headers(), &request_id.0),
            path_and_query: req
                .uri()
                .path_and_query()
                .map_or(path, |p| p.as_str())
                .to_owned(),
            shared,
            parsed,
            routed,
            body,
        })
    }

    async fn run(self) -> Result<Response<RespBody>, Error> {
        let (attempts, pause) = match self.routed.server.retry {
            Some((n, pause)) => (n, pause),
            None => (
                DEFAULT_ATTEMPTS.min(self.sched.ranked.len()),
                Duration::ZERO,
            ),
        };
        self.acct.upstream_begin();
        let mut last_fail: Option<String> = None;
        let mut last_resp = None;
        for attempt in 0..attempts {
            if attempt > 0 && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            match self.attempt(attempt).await? {
                Step::Answer(r) => return Ok(r),
                Step::Skip => {}
                Step::Failed { why, resp, stop } => {
                    last_fail = Some(why);
                    last_resp = resp;
                    if stop {
                        break;
                    }
                }
            }
        }
        self.acct.upstream_end();
        if let Some((p, b)) = last_resp {
            // The last answer was 429/5xx (or an adapter 404): hand it to the client unchanged.
            let status = p.status.as_u16();
            let why = last_fail.unwrap_or_default();
            self.acct
                .finish(status, Some(("upstream_response", why)), "upstream", 0);
            let mut r = Response::from_parts(p, full(b));
            strip_hop_by_hop(r.headers_mut());
            return Ok(r);
        }
        Err(Error::AllUpstreamsFailed {
            server: self.routed.server.key.clone(),
            attempts,
            last: last_fail.unwrap_or_default(),
        })
    }

    async fn attempt(&self, attempt: usize) -> Result<Step, Error> {
        let ranked = &self.sched.ranked;
        let Some(&idx) = ranked.get(attempt % ranked.len().max(1)) else {
            return Ok(Step::Skip);
        };
        let ep = &self.routed.pool[idx];
        let lora = self.routed.lora.as_deref();
        if lora.is_some_and(|a| !ep.has_lora(a)) {
            // Found without the adapter by an earlier attempt of this request.
            return Ok(Step::Skip);
        }
        let cfg = &self.shared.overload;
        match ep.breaker().try_pass(Instant::now(), cfg.breaker_cool_down) {
            None => return Ok(Step::Skip),
            Some(BreakerState::HalfOpen) => {
                let m = &self.shared.metrics.overload;
                m.breaker(&ep.namespace, &ep.name, BreakerState::HalfOpen);
            }
            Some(_) => {}
        }
        self.acct.attempt(&ep.name, attempt + 1);
        let snap = &self.parsed.snap;
        let sreq = sched_request(&self.parsed.req, &self.tokens, lora, &self.prefetched);
        let cand = &self.sched.cands[idx];
        // Cache-affinity plugins learn the decision now, while the engine prefills, so that
        // the next request with the same new prefix follows this one (Go Kthena's
        // PostSchedule runs only after a successful answer). The owned completion data
        // carries the prefill tokens to count (computed before the plugins recorded it).
        let done = snap.scheduler.on_scheduled(&sreq, cand);
        let mut guard = ep.begin_request(done.prefill_tokens);
        if let Some(s) = self.shared.in_flight_share.get() {
            s.track(ep, &mut guard).await;
        }
        let done = SchedDone {
            scheduler: Arc::clone(&snap.scheduler),
            done,
        };
        match self.send(ep).await? {
            Err(e) => {
                self.acct.attempt_failed();
                drop(guard);
                done.scheduler.on_completed(&done.done, false);
                self.breaker_result(ep, false);
                tracing::debug!(endpoint = %ep.name, attempt, error = ?e, "Upstream attempt failed; trying the next endpoint");
                Ok(Step::Failed {
                    why: format!("{} ({}): {}", ep.name, ep.address, error_chain(&e)),
                    resp: None,
                    stop: false,
                })
            }
            Ok(resp) => self.answered(ep, resp, (guard, done)).await,
        }
    }

    /// Sends the body to `ep`; the outer error is the ModelServer's timeout.
    async fn send(&self, ep: &Arc<Endpoint>) -> Result<Result<Response<UpBody>, SendError>, Error> {
        let fut = send_upstream(
            &self.shared,
            ep,
            &self.path_and_query,
            &self.headers,
            self.body.bytes.clone(),
        );
        let Some(t) = self.routed.server.timeout else {
            return Ok(fut.await);
        };
        if let Ok(r) = tokio::time::timeout(t, fut).await {
            return Ok(r);
        }
        self.acct.upstream_end();
        self.breaker_result(ep, false);
        Err(Error::UpstreamTimeout {
            endpoint: ep.name.clone(),
            timeout: t,
        })
    }

    async fn answered(
        &self,
        ep: &Arc<Endpoint>,
        resp: Response<UpBody>,
        (guard, done): (LoadGuard, SchedDone),
    ) -> Result<Step, Error> {
        let status = resp.status();
        self.acct.upstream_status(status.as_u16());
        self.breaker_result(ep, !status.is_server_error());
        let lora = self.routed.lora.as_deref();
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
            self.acct.attempt_failed();
            drop(guard);
            done.scheduler.on_completed(&done.done, false);
            let mut stop = false;
            if lora_404 {
                match lora.filter(|_| crate::lora::is_missing_model(&bytes)) {
                    None => stop = true,
                    Some(a) => {
                        ep.set_lora(a, false);
                        stop = !self.routed.pool.iter().any(|e| e.has_lora(a));
                    }
                }
            }
            return Ok(Step::Failed {
                why: format!("{} answered {status}", ep.name),
                resp: Some((p, bytes)),
                stop,
            });
        }
        let mut resp = resp;
        if let Some(t) = self.hung_after_head(&mut resp).await {
            // The client gets 504 rather than a 200 head whose body then breaks; dropping
            // the answer closes the engine connection.
            self.acct.attempt_failed();
            drop(guard);
            done.scheduler.on_completed(&done.done, false);
            self.acct.upstream_end();
            self.breaker_result(ep, false);
            return Err(Error::UpstreamTimeout {
                endpoint: ep.name.clone(),
                timeout: t,
            });
        }
        self.acct.answered(guard, done);
        let injected = self.body.injected_usage;
        Ok(Step::Answer(stream_response(
            resp,
            self.acct.clone(),
            &self.parsed.req,
            injected,
            &self.shared,
        )))
    }

    /// For a non-streamed answer (neither the request nor the answer's `Content-Type` is a
    /// stream), waits up to `upstreamIdleTimeout` for its body to begin before the head goes
    /// to the client; `Some(timeout)` when it did not (the engine hung after its headers).
    async fn hung_after_head(&self, resp: &mut Response<UpBody>) -> Option<Duration> {
        let t = self.shared.upstream_idle_timeout?;
        if self.parsed.req.stream || is_stream_type(resp.headers()) {
            return None;
        }
        (!resp.body_mut().wait_first_frame(t).await).then_some(t)
    }

    /// Feeds `ep`'s breaker and exports a state change.
    fn breaker_result(&self, ep: &Endpoint, success: bool) {
        record_breaker(&self.shared, ep, success);
    }
}

/// POSTs `body` to `ep` at `path_and_query` with `headers`: on a serving thread over an
/// engine connection the request itself drives ([`upstream::send`]; endpoints given by IP
/// address), elsewhere, or for an endpoint given by host name (resolved per connection),
/// through the shared pooled client.
///
/// # Errors
/// [`SendError`]: no connection, or it failed before the answer head.
pub(crate) async fn send_upstream(
    shared: &Shared,
    ep: &Endpoint,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<UpBody>, SendError> {
    let direct = if upstream::enabled() {
        ep.address.parse::<std::net::SocketAddr>().ok()
    } else {
        None
    };
    let Some(addr) = direct else {
        let uri = format!("{}{}", ep.base_url(), path_and_query);
        let mut up = Request::builder().method(Method::POST).uri(&uri);
        if let Some(h) = up.headers_mut() {
            h.clone_from(headers);
        }
        // invariant: the URI is built from a validated endpoint address and request path.
        let up = up.body(Full::new(body)).unwrap_or_default();
        let fut = crate::serving::with_client(&shared.client, |c| c.request(up));
        return fut
            .await
            .map(|r| r.map(UpBody::from))
            .map_err(SendError::Pooled);
    };
    let mut up = Request::builder().method(Method::POST).uri(path_and_query);
    if let Some(h) = up.headers_mut() {
        h.clone_from(headers);
        if let Ok(v) = HeaderValue::from_str(&host_header(addr)) {
            h.insert(header::HOST, v);
        }
    }
    // invariant: the request path was parsed from the client's request line.
    let up = up.body(Full::new(body)).unwrap_or_default();
    // Boxed: the future holds the connection (a few KiB) while it waits for the answer head.
    Box::pin(upstream::send(addr, up)).await
}

/// The `Host` of a request to `addr`, as hyper's pooled client writes it for an
/// `http://` URI: the port only when it is not 80.
fn host_header(addr: std::net::SocketAddr) -> String {
    match (addr.ip(), addr.port()) {
        (std::net::IpAddr::V4(ip), 80) => ip.to_string(),
        (std::net::IpAddr::V6(ip), 80) => format!("[{ip}]"),
        _ => addr.to_string(),
    }
}

/// Feeds `ep`'s circuit breaker with one request's result and exports a state change.
pub(crate) fn record_breaker(shared: &Shared, ep: &Endpoint, success: bool) {
    let cfg = &shared.overload;
    let now = Instant::now();
    let threshold = cfg.breaker_failures;
    if let Some(state) = ep
        .breaker()
        .record(success, now, threshold, cfg.breaker_cool_down)
    {
        if state == BreakerState::Open {
            tracing::warn!(endpoint = %ep.name, cool_down = ?cfg.breaker_cool_down, "Circuit breaker open: the endpoint gets no requests until the cool-down ends");
        }
        shared
            .metrics
            .overload
            .breaker(&ep.namespace, &ep.name, state);
    }
}

pub(crate) fn stream_response(
    resp: Response<UpBody>,
    acct: Accounting,
    parsed: &ParsedRequest,
    injected_usage: bool,
    shared: &Shared,
) -> Response<RespBody> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let sse = is_stream_type(&parts.headers);
    if parsed.stream || sse {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    let status = parts.status.as_u16();
    let hide_usage = injected_usage && !parsed.client_wants_usage;
    let body = ProxyBody::new(body, acct, status, sse, hide_usage)
        .with_idle_timeout(shared.upstream_idle_timeout)
        .with_drain_cut(shared.drain_cut.clone());
    Response::from_parts(parts, BodyExt::boxed_unsync(body))
}

/// Whether an answer's `Content-Type` is a stream (SSE or NDJSON).
fn is_stream_type(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.starts_with("text/event-stream") || v.starts_with("application/x-ndjson")
        })
}

/// The hop-by-hop headers of RFC 9110 section 7.6.1 (and `keep-alive`), as header names so
/// removing them neither parses nor lower-cases a string.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub(crate) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
    for n in listed {
        h.remove(n.as_str());
    }
}

pub(crate) fn upstream_headers(client: &HeaderMap, request_id: &str) -> HeaderMap {
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
    // The router reads every answer (usage, error events) and hides the usage chunk it
    // asked for: a compressed one it could do neither with. Without the header any coding
    // would be acceptable (RFC 9110 section 12.5.3), so ask for none.
    h.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(HeaderName::from_static("x-request-id"), v);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_headers_drop_hop_by_hop_and_connection_listed_ones() {
        let mut client = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Trace-Hop"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic abc"),
            ("upgrade", "h2c"),
            ("x-trace-hop", "1"),
            ("host", "router:8080"),
            ("content-length", "12"),
            ("expect", "100-continue"),
            ("authorization", "Bearer t"),
            ("x-user", "alice"),
            ("accept-encoding", "gzip, br"),
        ] {
            client.append(
                HeaderName::from_static(k),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let up = upstream_headers(&client, "req-1");
        let mut names: Vec<&str> = up.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "accept-encoding",
                "authorization",
                "content-type",
                "x-request-id",
                "x-user"
            ]
        );
        assert_eq!(up["accept-encoding"], "identity");
        assert_eq!(up["x-request-id"], "req-1");
        assert_eq!(up["content-type"], "application/json");
    }
}
