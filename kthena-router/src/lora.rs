//! LoRA adapters: which endpoints may serve an adapter request, how an engine's "model does
//! not exist" answer is recognised, and the `/v1/load_lora_adapter` and
//! `/v1/unload_lora_adapter` calls proxied to one endpoint.
//!
//! An endpoint's adapters come from its `GET /v1/models` (refreshed with every metrics
//! scrape) and, between scrapes, from the engine's answers to load/unload calls sent through
//! the router and from its 404 for an adapter request.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::auth::{AuthConfig, Principal};
use crate::body::read::{ReadBody, ReadLimits, read_body};
use crate::body::{RespBody, full};
use crate::discovery::Server;
use crate::error::Error;
use crate::shared::Shared;
use crate::telemetry::accounting::Accounting;
use crate::upstream::endpoint::Endpoint;

/// The header that names the endpoint (`name` or `namespace/name`) a load/unload call is
/// sent to.
pub(crate) const ENDPOINT_HEADER: &str = "x-kthena-endpoint";

/// Largest load/unload body and engine answer read, in bytes.
const MAX_ADMIN_BODY: usize = 64 * 1024;

/// The endpoints of `server` a request may go to. For a LoRA adapter request (`adapter` is
/// `Some`) only those whose engine lists the adapter; base-model requests are never filtered
/// by adapters. Among those, the endpoints whose scrapes work, or all of them when none
/// does (a scrape failure does not prove the inference port is down).
///
/// # Errors
/// [`Error::NoReadyEndpoint`] when the server selects no endpoint,
/// [`Error::LoraAdapterNotLoaded`] when none of them lists the adapter.
pub(crate) fn candidates(
    server: &Server,
    adapter: Option<&str>,
) -> Result<Vec<Arc<Endpoint>>, Error> {
    if server.endpoints.is_empty() {
        return Err(Error::NoReadyEndpoint {
            server: server.key.clone(),
        });
    }
    let serving: Vec<Arc<Endpoint>> = match adapter {
        Some(a) => server
            .endpoints
            .iter()
            .filter(|e| e.has_lora(a))
            .cloned()
            .collect(),
        None => server.endpoints.clone(),
    };
    if let (Some(a), true) = (adapter, serving.is_empty()) {
        return Err(Error::LoraAdapterNotLoaded {
            adapter: a.to_owned(),
            server: server.key.clone(),
        });
    }
    let up: Vec<Arc<Endpoint>> = serving.iter().filter(|e| e.is_up()).cloned().collect();
    Ok(if up.is_empty() { serving } else { up })
}

/// Whether an engine's 404 body says the requested model does not exist (vLLM:
/// ``The model `x` does not exist.``), the answer of an engine without the adapter.
pub(crate) fn is_missing_model(body: &[u8]) -> bool {
    std::str::from_utf8(body).is_ok_and(|t| t.contains("does not exist"))
}

/// Whether the caller may load or unload adapters through the inference port: with
/// authentication on (`authenticated`), a token holding `auth.adminScope`; with it off, only
/// when `auth.allowUnauthenticatedAdmin` is set. Go Kthena's router has no such calls.
///
/// # Errors
/// [`Error::AdminForbidden`] (403) naming what is missing.
pub(crate) fn may_administer(
    cfg: &AuthConfig,
    authenticated: bool,
    caller: Option<&Principal>,
) -> Result<(), Error> {
    match caller {
        Some(who) if who.has_scope(&cfg.admin_scope) => Ok(()),
        Some(who) => Err(Error::AdminForbidden {
            reason: format!(
                "the token of `{}` lacks the scope `{}` that LoRA adapter administration needs",
                who.sub, cfg.admin_scope
            ),
        }),
        None if !authenticated && cfg.allow_unauthenticated_admin => Ok(()),
        None => Err(Error::AdminForbidden {
            reason: "LoRA adapter administration is off on this port: turn on authentication \
                     (auth.jwksUri) and give callers the admin scope, or set \
                     auth.allowUnauthenticatedAdmin"
                .to_owned(),
        }),
    }
}

/// `Some(true)` for `/v1/load_lora_adapter`, `Some(false)` for `/v1/unload_lora_adapter`.
pub(crate) fn admin_path(path: &str) -> Option<bool> {
    match path {
        "/v1/load_lora_adapter" => Some(true),
        "/v1/unload_lora_adapter" => Some(false),
        _ => None,
    }
}

/// Answers `POST /v1/load_lora_adapter` (`load`) or `/v1/unload_lora_adapter`: forwards the
/// body to the endpoint named by [`ENDPOINT_HEADER`] and passes its answer back unchanged. A
/// success (and vLLM's "already loaded" 400 or "cannot be found" 404) updates the endpoint's
/// adapter list at once, before the next scrape. Reports the answer to `acct`.
///
/// # Errors
/// [`Error::MethodNotAllowed`], [`Error::EndpointRequired`], [`Error::EndpointNotFound`],
/// [`Error::BodyRead`], [`Error::AllUpstreamsFailed`] (the engine could not be reached).
pub(crate) async fn admin(
    shared: &Shared,
    req: Request<Incoming>,
    load: bool,
    acct: &Accounting,
) -> Result<Response<RespBody>, Error> {
    let (resp, endpoint) = forward(shared, req, load).await?;
    let status = resp.status().as_u16();
    acct.admin_answered(&endpoint, status);
    let error =
        (status >= 400).then(|| ("upstream_response", format!("upstream answered {status}")));
    acct.finish(status, error, "upstream", 0);
    Ok(resp)
}

async fn forward(
    shared: &Shared,
    req: Request<Incoming>,
    load: bool,
) -> Result<(Response<RespBody>, String), Error> {
    if req.method() != Method::POST {
        return Err(Error::MethodNotAllowed {
            method: req.method().to_string(),
            path: req.uri().path().to_owned(),
        });
    }
    let name = req
        .headers()
        .get(ENDPOINT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or(Error::EndpointRequired)?
        .to_owned();
    let snap = shared.snapshot.load_full();
    let ep = snap
        .endpoints
        .iter()
        .find(|e| e.name == name || format!("{}/{}", e.namespace, e.name) == name)
        .cloned()
        .ok_or(Error::EndpointNotFound { name })?;
    let path = req.uri().path().to_owned();
    let lim = ReadLimits {
        max_bytes: MAX_ADMIN_BODY,
        idle_timeout: shared.listener.body_read_idle_timeout,
        total_timeout: shared.listener.body_read_timeout,
        budget: &shared.body_budget,
    };
    // The same size, time and budget limits as every body; the reservation is held until
    // the engine answered.
    let ReadBody {
        bytes: body,
        held: _held,
        ..
    } = read_body(req, lim).await?;
    let adapter = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("lora_name")?.as_str().map(str::to_owned));
    let failed = |last: String| Error::AllUpstreamsFailed {
        server: ep.name.clone(),
        attempts: 1,
        last,
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let dest = crate::upstream::Dest::Engine {
        ep: &ep,
        path_and_query: &path,
    };
    let resp = crate::upstream::send(shared, dest, &headers, body)
        .await
        .map_err(|e| failed(crate::error::error_chain(&e)))?;
    let (parts, b) = resp.into_parts();
    let answer = Limited::new(b, MAX_ADMIN_BODY)
        .collect()
        .await
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    if let Some(a) = adapter.filter(|a| !a.is_empty()) {
        note_answer(&ep, &a, load, parts.status, &answer);
    }
    let mut r = Response::new(full(answer));
    *r.status_mut() = parts.status;
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/json"));
    r.headers_mut().insert(header::CONTENT_TYPE, ct);
    Ok((r, ep.name.clone()))
}

/// Updates `ep`'s adapter list from the engine's answer to a load (`load`) or unload call.
fn note_answer(ep: &Endpoint, adapter: &str, load: bool, status: StatusCode, body: &Bytes) {
    let text = String::from_utf8_lossy(body);
    let loaded = match (load, status.as_u16()) {
        (true, 200..=299) => Some(true),
        (true, 400) if text.contains("already been loaded") => Some(true),
        (false, 200..=299) | (false, 404) => Some(false),
        _ => None,
    };
    if let Some(on) = loaded {
        ep.set_lora(adapter, on);
        tracing::info!(endpoint = %ep.name, adapter, loaded = on, "LoRA adapter list updated from the engine's answer");
    }
}
