//! The Gateway API Inference Extension's side of route matching: a request no ModelRoute
//! served goes through the HTTPRoutes of its Gateway listener to an InferencePool, whose
//! pods are the snapshot's endpoints (Go Kthena `pkg/kthena-router/router/httproute_match.go`).

use std::sync::Arc;

use http::Request;
use kthena_api::ModelServer;

use super::ctx::{Ctx, Parsed, Routed};
use crate::discovery::{Server, Snapshot};
use crate::error::Error;
use crate::gateway::{EffectivePath, ListenerPort, Pool, PoolChoice, UpstreamHost};
use crate::shared::Shared;
use crate::upstream::endpoint::Endpoint;

/// The request's host: the target's authority (HTTP/2 `:authority`, an absolute-form target),
/// else the `Host` header.
pub(super) fn host_of<B>(req: &Request<B>) -> &str {
    // The request target's authority first: HTTP/2's `:authority`, or an HTTP/1.1
    // absolute-form target, whose `Host` header a server must ignore (RFC 9112 section
    // 3.2.2), as a proxy in front of the router does.
    req.uri()
        .authority()
        .map(http::uri::Authority::as_str)
        .or_else(|| {
            req.headers()
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("")
}

/// In Gateway API mode with the inference extension, when an HTTPRoute of the request's
/// listener matches its host and path: the path its body is parsed as (after the rule's
/// `URLRewrite`, [`crate::gateway::effective_path`]).
pub(crate) fn effective_path<B>(shared: &Shared, req: &Request<B>) -> Option<EffectivePath> {
    let gw = shared.gateway.load();
    let port = req.extensions().get::<ListenerPort>().copied();
    crate::gateway::effective_path(gw.as_deref()?, port, host_of(req), req.uri().path())
        .map(EffectivePath)
}

/// What an HTTPRoute's `URLRewrite` changes for the engine: the path (when it differs
/// from the request's) and the `Host`.
#[derive(Debug, Default)]
pub(super) struct Rewritten {
    /// The new path.
    pub(super) path: Option<String>,
    /// The new `Host`.
    pub(super) host: Option<UpstreamHost>,
}

/// In Gateway API mode with the inference extension: the HTTPRoute → InferencePool route
/// of a request no ModelRoute served, else `fallback`.
pub(super) fn via_gateway(
    shared: &Shared,
    req: &Request<Ctx<()>>,
    parsed: &Parsed,
    fallback: Error,
) -> Result<(Routed, Rewritten), Error> {
    let Some(gw) = shared.gateway.load_full().filter(|g| g.inference_extension) else {
        return Err(fallback);
    };
    let host = host_of(req);
    let port = req.extensions().get::<ListenerPort>().copied();
    let listener = crate::gateway::listener_for(&gw, port, host)?;
    let choice = {
        let mut rng = shared.rng();
        crate::gateway::choose_pool(&gw, listener, host, req.uri().path(), &mut *rng)?
    };
    let Some(c) = choice else {
        return Err(fallback);
    };
    let endpoints = pool_endpoints(&c.pool, &parsed.snap);
    if endpoints.is_empty() {
        return Err(Error::NoReadyEndpoint { server: c.pool_key });
    }
    req.body().meta.acct.pool_resolved(
        &listener.gateway_key(),
        &c.route,
        &c.pool_key,
        &parsed.req.model,
    );
    tracing::debug!(gateway = %listener.gateway_key(), http_route = %c.route, inference_pool = %c.pool_key, "Routed by HTTPRoute");
    let server = Arc::new(pool_server(&c, endpoints));
    let pool = crate::lora::candidates(&server, None)?;
    let rewritten = Rewritten {
        path: (c.path != req.uri().path()).then(|| c.path.clone()),
        host: c
            .hostname
            .as_deref()
            .and_then(|h| http::HeaderValue::from_str(h).ok())
            .map(UpstreamHost),
    };
    Ok((
        Routed {
            server,
            lora: None,
            upstream_model: parsed.req.model.clone(),
            pool: Arc::new(pool),
        },
        rewritten,
    ))
}

/// The endpoints of `pool`: those of the snapshot in its namespace carrying every
/// `matchLabels` pair and serving on its first target port (pods are endpoints only when
/// some ModelServer selects them, as in Go Kthena).
fn pool_endpoints(pool: &Pool, snap: &Snapshot) -> Vec<Arc<Endpoint>> {
    snap.endpoints
        .iter()
        .filter(|e| {
            e.namespace == pool.namespace
                && pool.port == Some(e.socket.port())
                && pool
                    .match_labels
                    .iter()
                    .all(|(k, v)| e.labels.get(k) == Some(v))
        })
        .cloned()
        .collect()
}

/// A ModelServer-shaped view of the chosen pool: key `namespace/name` of the pool, vLLM,
/// no traffic policy.
fn pool_server(c: &PoolChoice, endpoints: Vec<Arc<Endpoint>>) -> Server {
    let (namespace, name) = c.pool_key.split_once('/').unwrap_or(("", &c.pool_key));
    Server {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key: c.pool_key.clone(),
        model: None,
        engine: kthena_api::networking::InferenceEngine::default(),
        timeout: None,
        retry: None,
        endpoints,
        prefill_endpoints: Vec::new(),
        decode_endpoints: Vec::new(),
        pd: None,
        object: ModelServer::default(),
    }
}
