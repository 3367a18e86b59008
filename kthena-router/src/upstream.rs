//! The one way a request reaches an engine or an external provider: [`send`].
//!
//! Every forward path calls it: the aggregated proxy (`pipeline::forward`), prefill/decode
//! (`pd::flow`), external providers (`provider::forward`) and the LoRA admin calls
//! (`lora`). An engine endpoint given by IP address is reached, on a serving thread, over an
//! engine connection the request itself drives ([`conn`]); an endpoint given by host name,
//! or a request off the serving threads, goes through the router's pooled client; an
//! external provider through the process's HTTPS client ([`tls`]).
//!
//! Also here: the headers sent upstream ([`upstream_headers`], hop-by-hop removal), the
//! circuit-breaker bookkeeping of one result ([`record_breaker`]) and the answer streamed
//! back to the client ([`stream_response`] over [`body::ProxyBody`]). Submodules: endpoints
//! and their live state ([`endpoint`]), circuit breakers and in-flight caps ([`overload`]),
//! the in-flight counts shared through Redis or an in-process board ([`inflight`]).

pub(crate) mod body;
pub(crate) mod conn;
pub(crate) mod endpoint;
pub(crate) mod inflight;
pub(crate) mod overload;
pub(crate) mod tls;

pub use inflight::{InFlightBoard, ON_FLIGHT_KEY, SYNC_INTERVAL};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use tokio::time::Instant;

pub(crate) use crate::body::ReqBody;
pub(crate) use conn::{SendError, UpBody};

use crate::body::RespBody;
use crate::shared::Shared;
use crate::telemetry::accounting::Accounting;
use body::ProxyBody;
use endpoint::Endpoint;
use kthena_openai::ParsedRequest;
use overload::BreakerState;

/// Where one upstream call goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest<'a> {
    /// An engine endpoint, at `path_and_query` (plain HTTP).
    Engine {
        /// The endpoint.
        ep: &'a Endpoint,
        /// The request's path and query, as sent.
        path_and_query: &'a str,
    },
    /// A URL outside the cluster (an ExternalModelProvider), `https://` only.
    External {
        /// The whole URL.
        url: &'a str,
        /// Accept any server certificate (`insecureSkipVerify`).
        insecure: bool,
    },
}

/// POSTs `body` (held bytes, or held bytes and a streamed client tail) with `headers` to
/// `dest` and returns the answer once its head arrived.
///
/// # Errors
/// [`SendError`]: no connection (or no TLS client), or it failed before the answer head.
pub(crate) async fn send(
    shared: &Shared,
    dest: Dest<'_>,
    headers: &HeaderMap,
    body: impl Into<ReqBody>,
) -> Result<Response<UpBody>, SendError> {
    let body = body.into();
    match dest {
        Dest::Engine { ep, path_and_query } => {
            send_engine(shared, ep, path_and_query, headers, body).await
        }
        Dest::External { url, insecure } => {
            let client = tls::client(tls::Scheme::HttpsOnly, insecure)?;
            let up = post(url, headers, body).map_err(SendError::Request)?;
            let resp = client.request(up).await.map_err(SendError::Pooled)?;
            Ok(resp.map(UpBody::from))
        }
    }
}

/// A POST of `body` to `uri` with `headers`.
fn post(uri: &str, headers: &HeaderMap, body: ReqBody) -> Result<Request<ReqBody>, http::Error> {
    let mut up = Request::builder().method(Method::POST).uri(uri);
    if let Some(h) = up.headers_mut() {
        h.clone_from(headers);
    }
    up.body(body)
}

/// An engine call: on a serving thread over an engine connection the request itself drives
/// ([`conn::send`]; endpoints given by IP address), elsewhere, or for an endpoint given by
/// host name (resolved per connection), through the pooled client.
async fn send_engine(
    shared: &Shared,
    ep: &Endpoint,
    path_and_query: &str,
    headers: &HeaderMap,
    body: ReqBody,
) -> Result<Response<UpBody>, SendError> {
    let direct = if conn::enabled() {
        ep.address.parse::<std::net::SocketAddr>().ok()
    } else {
        None
    };
    let Some(addr) = direct else {
        let uri = format!("{}{}", ep.base_url(), path_and_query);
        let up = post(&uri, headers, body).map_err(SendError::Request)?;
        let fut = crate::server::serving::with_client(&shared.client, |c| c.request(up));
        return fut
            .await
            .map(|r| r.map(UpBody::from))
            .map_err(SendError::Pooled);
    };
    let mut up = Request::builder().method(Method::POST).uri(path_and_query);
    if let Some(h) = up.headers_mut() {
        h.clone_from(headers);
        // An HTTPRoute's hostname rewrite set `Host` already (the pooled client keeps a
        // `Host` it is given too).
        if !h.contains_key(header::HOST)
            && let Ok(v) = HeaderValue::from_str(&host_header(addr))
        {
            h.insert(header::HOST, v);
        }
    }
    let up = up.body(body).map_err(SendError::Request)?;
    // Boxed: the future holds the connection (a few KiB) while it waits for the answer head.
    Box::pin(conn::send(addr, up)).await
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

/// Feeds `ep`'s circuit breaker with one request's result, exports a state change and
/// logs a breaker that opens.
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

/// Lets a request through `ep`'s circuit breaker: `false` while it is open; a half-open
/// probe is exported.
pub(crate) fn pass_breaker(shared: &Shared, ep: &Endpoint, now: Instant) -> bool {
    match ep
        .breaker()
        .try_pass(now, shared.overload.breaker_cool_down)
    {
        None => false,
        Some(BreakerState::HalfOpen) => {
            let m = &shared.metrics.overload;
            m.breaker(&ep.namespace, &ep.name, BreakerState::HalfOpen);
            true
        }
        Some(_) => true,
    }
}

/// The answer to the client: the upstream head without hop-by-hop headers (and without
/// `Content-Length` for a stream), the body streamed through a [`ProxyBody`] that settles
/// `acct` when it ends; `injected_usage` hides the usage chunk the router asked for.
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
pub(crate) fn is_stream_type(h: &HeaderMap) -> bool {
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

/// Removes the hop-by-hop headers and those the `Connection` header lists.
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

/// The headers an engine gets: the client's, without hop-by-hop ones, `Host`,
/// `Content-Length` and `Expect`; JSON (a multipart form keeps its `Content-Type`), no
/// content coding, and the request id.
pub(crate) fn upstream_headers(client: &HeaderMap, request_id: &str) -> HeaderMap {
    let mut h = client.clone();
    strip_hop_by_hop(&mut h);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    // The router has read the body (or a streamed upload's first part) already, and
    // answered the client's `100 Continue` itself; the engine must not wait for one.
    h.remove(header::EXPECT);
    // A multipart form (audio uploads) keeps its type and boundary; any other body is the
    // JSON the router parsed.
    if crate::body::form::boundary(&h).is_none() {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
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
mod tests;
