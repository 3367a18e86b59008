//! Match route: the ModelRoute (model or LoRA adapter, rules, weights) and its ModelServer,
//! and the endpoints that may serve the request (pod discovery). Leaves [`Routed`].

use std::sync::Arc;

use http::{Request, Response};
use tower::Service;

use super::ctx::{Ctx, Parsed, Routed};
use super::stage;
use crate::body::RespBody;
use crate::error::Error;
use crate::gateway::{CompiledListener, ListenerPort};
use crate::routing::{MatchError, TargetRef};
use crate::shared::Shared;

stage!(
    /// Matches the request to a ModelRoute and ModelServer.
    RouteLayer,
    Route,
    Request<Ctx<()>> => Request<Ctx<Routed>>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    mut req: Request<Ctx<()>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Routed>>, Response = Response<RespBody>, Error = Error>,
{
    let (target, rewritten) = super::hold::resolve_or_hold(&shared, &mut req).await?;
    // A path an HTTPRoute rewrote goes upstream rewritten also when a ModelRoute serves the
    // model: the body was parsed as a request to that path.
    let effective = req
        .extensions()
        .get::<crate::gateway::EffectivePath>()
        .map(|p| p.0.clone());
    if let Some(path) = rewritten.path.or(effective) {
        set_path(&mut req, &path);
    }

    if let Some(host) = rewritten.host {
        req.extensions_mut().insert(host);
    }
    match target {
        Target::Server(routed) => inner.call(req.map(|c| c.with(routed))).await,
        // The endpoint picker names endpoints of ModelServers only.
        Target::Provider(p) if req.body().meta.pick_only => Err(Error::NotPickable {
            reason: format!("its route goes to the external provider {}", p.key),
        }),
        // An external provider: the route's token rate limit applies; there are no
        // endpoints to admit, tokenize for or schedule.
        Target::Provider(p) => {
            let ctx = req.body();
            super::ratelimit::admit(&shared, &ctx.meta, &ctx.parsed, req.uri().path()).await?;
            crate::provider::forward::forward(shared, req, p).await
        }
    }
}

/// Where the route sends the request.
pub(super) enum Target {
    /// A ModelServer and its endpoints.
    Server(Routed),
    /// An ExternalModelProvider.
    Provider(Arc<crate::provider::Provider>),
}

/// Replaces the request path (an HTTPRoute `URLRewrite`), keeping the query.
fn set_path<B>(req: &mut Request<B>, path: &str) {
    let pq = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = req.uri().clone().into_parts();
    parts.path_and_query = pq.parse().ok();
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
}

/// The target, and the upstream path and `Host` when an HTTPRoute rewrote them. In Gateway API mode
/// the request's listener must exist; a request no ModelRoute serves may go through an
/// HTTPRoute to an InferencePool.
pub(super) fn resolve(
    shared: &Shared,
    req: &Request<Ctx<()>>,
) -> Result<(Target, super::gateway::Rewritten), Error> {
    let p = &req.body().parsed;
    let gw = shared.gateway.load_full();
    let listener = match &gw {
        Some(gw) => Some(crate::gateway::listener_for(
            gw,
            req.extensions().get::<ListenerPort>().copied(),
            super::gateway::host_of(req),
        )?),
        None => None,
    };
    match resolve_model_route(shared, req, p, listener) {
        Ok(t) => Ok((t, super::gateway::Rewritten::default())),
        Err(
            e @ (Error::ModelNotFound { .. }
            | Error::NoRuleMatched { .. }
            | Error::RouteNotAttached { .. }),
        ) => {
            let (routed, path) = super::gateway::via_gateway(shared, req, p, e)?;
            Ok((Target::Server(routed), path))
        }
        Err(e) => Err(e),
    }
}

/// The ModelRoute target; in Gateway API mode only routes serving `listener` compete
/// (`parentRefs`, [`crate::gateway::model_route_serves`]).
fn resolve_model_route(
    shared: &Shared,
    req: &Request<Ctx<()>>,
    p: &Parsed,
    listener: Option<&CompiledListener>,
) -> Result<Target, Error> {
    let Parsed { req: parsed, snap } = p;
    let acct = &req.body().meta.acct;
    let serves = |r: &crate::routing::model_route::CompiledRoute| {
        crate::gateway::model_route_serves(&r.namespace, &r.parent_refs, listener)
    };
    let m = {
        let mut rng = shared.rng();
        snap.routes.match_request(
            &parsed.model,
            req.headers(),
            req.uri().path(),
            &mut *rng,
            serves,
        )
    };
    let m = m.map_err(|e| match e {
        MatchError::UnknownModel => Error::ModelNotFound {
            model: parsed.model.clone(),
        },
        MatchError::NoRule => Error::NoRuleMatched {
            model: parsed.model.clone(),
        },
        MatchError::NotAttached {
            namespace,
            name,
            parent_refs,
        } => Error::RouteNotAttached {
            model: parsed.model.clone(),
            route: format!("{namespace}/{name}"),
            reason: crate::gateway::why_not_attached(&namespace, &parent_refs, listener),
        },
    })?;
    let route_key = m.route.key();
    acct.route_matched(&route_key);
    let server_name = match &m.target {
        TargetRef::ModelServer(s) => s.clone(),
        TargetRef::ExternalProvider(p) => {
            let key = format!("{}/{p}", m.route.namespace);
            let Some(provider) = snap.providers.get(&key).cloned() else {
                return Err(Error::ProviderNotFound { provider: key });
            };
            let upstream = provider
                .model
                .clone()
                .unwrap_or_else(|| parsed.model.clone());
            acct.provider_resolved(&route_key, &key, &upstream);
            return Ok(Target::Provider(provider));
        }
    };
    let server_key = format!("{}/{server_name}", m.route.namespace);
    let Some(server) = snap.servers.get(&server_key).cloned() else {
        return Err(Error::ServerNotFound { server: server_key });
    };
    // A form's `model` goes to the engine as the client wrote it (never rewritten).
    let upstream_model = if m.is_lora || crate::body::form::boundary(req.headers()).is_some() {
        parsed.model.clone()
    } else {
        server.model.clone().unwrap_or_else(|| parsed.model.clone())
    };
    acct.server_resolved(&route_key, &server.key, &upstream_model);
    // LoRA requests only go to endpoints that list the adapter; base requests to all.
    let lora = m.is_lora.then(|| parsed.model.clone());
    let pool = crate::lora::candidates(&server, lora.as_deref())?;
    Ok(Target::Server(Routed {
        server,
        lora,
        upstream_model,
        pool: Arc::new(pool),
    }))
}

#[cfg(test)]
mod tests;
