//! Gateway API mode (`--enable-gateway-api`) and the Gateway API Inference Extension
//! (`--enable-gateway-api-inference-extension`) in cluster mode (Go Kthena's flags in
//! `cmd/kthena-router/main.go`; user guides `docs/kthena/docs/user-guide/gateway-api-support.md`
//! and `gateway-inference-extension-support.md`).
//!
//! [`matcher`] holds the pure matching rules, [`table`] compiles the watched objects,
//! [`watch`] runs the reflectors, opens a TCP listener for every Gateway listener port other
//! than the router's own ([`ports`]) and writes the statuses. At request time
//! [`listener_for`] picks the Gateway listener from the port the request came in on
//! ([`ListenerPort`]) and its `Host` header, [`model_route_serves`] tells which ModelRoutes
//! serve through it (`parentRefs`), and [`choose_pool`] routes through an HTTPRoute to an
//! InferencePool when no ModelRoute matched (the pipeline's route stage then takes the
//! pool's pods from the snapshot).
//!
//! This module depends on no routing-state module (discovery, service, config): they
//! depend on it.

mod dump;
mod ports;
mod status;
pub(crate) mod table;
mod watch;

use std::collections::HashMap;

use rand::Rng;
use serde::Deserialize;

use crate::error::Error;
pub(crate) use crate::routing::http_route::{
    CompiledListener, model_route_serves, why_not_attached,
};
pub(crate) use dump::config_dump;
pub(crate) use ports::{ServePort, Serving};
pub(crate) use table::{GatewayTable, Pool};
pub(crate) use watch::{StateSlot, spawn};

/// GatewayClass served by the router.
pub(crate) const GATEWAY_CLASS: &str = "kthena-router";
/// `controllerName` of [`GATEWAY_CLASS`].
pub(crate) const CONTROLLER_NAME: &str = "volcano.sh/kthena-router";
/// API group of InferencePool backends.
pub(crate) const INFERENCE_POOL_GROUP: &str = "inference.networking.k8s.io";
/// Name of the Gateway the router ensures in its namespace.
pub(crate) const DEFAULT_GATEWAY: &str = "default";

/// `gatewayApi` section of the config file; the flags `--enable-gateway-api` and
/// `--enable-gateway-api-inference-extension` turn the switches on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayApiConfig {
    /// Gateway API mode: Gateway listeners select the routing context.
    #[serde(default)]
    pub enabled: bool,
    /// HTTPRoute → InferencePool routing (requires `enabled`).
    #[serde(default)]
    pub inference_extension: bool,
    /// Namespace of the `default` Gateway (`POD_NAMESPACE`, else `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Namespaces whose Gateways this router serves (opens ports for, writes the status
    /// of); empty: every namespace (Go Kthena). HTTPRoutes and ModelRoutes of any namespace
    /// may still attach to those Gateways.
    #[serde(default)]
    pub gateway_namespaces: Vec<String>,
}

/// Request extension: the port of the Gateway listener socket the request came in on
/// (absent: the router's main inference port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListenerPort(pub(crate) u16);

/// Request extension set by the front service when an HTTPRoute of the request's listener
/// matches its host and path: the path after the matched rule's `URLRewrite` (the request
/// path when the rule has none). The body is parsed as a request to this path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EffectivePath(pub(crate) String);

/// Request extension set by the route stage when an HTTPRoute's `URLRewrite.hostname`
/// applies: the `Host` every attempt sends to the engine (retries and prefill-decode
/// included) in place of the engine's address (Go Kthena `applyURLRewrite` in
/// `pkg/kthena-router/router/router.go` sets `Request.Host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpstreamHost(pub(crate) http::HeaderValue);

impl UpstreamHost {
    /// Sets `Host` in `headers` when `ext` carries an [`UpstreamHost`].
    pub(crate) fn apply(ext: &http::Extensions, headers: &mut http::HeaderMap) {
        if let Some(h) = ext.get::<Self>() {
            headers.insert(http::header::HOST, h.0.clone());
        }
    }
}

/// The watched objects as the debug dump shows them (Go Kthena's store,
/// `pkg/kthena-router/debug/handlers.go`): the served Gateways, the HTTPRoutes with a
/// parentRef naming one of them, and the InferencePools, each sorted by `namespace/name`.
#[derive(Debug, Clone, Default)]
pub(crate) struct GatewayObjects {
    /// Gateways of class `kthena-router` this router serves.
    pub(crate) gateways: Vec<std::sync::Arc<kthena_api::gateway::Gateway>>,
    /// HTTPRoutes attached (by parentRef) to one of `gateways`.
    pub(crate) routes: Vec<std::sync::Arc<kthena_api::gateway::HTTPRoute>>,
    /// InferencePools (empty without the inference extension).
    pub(crate) pools: Vec<std::sync::Arc<kthena_api::thirdparty::InferencePool>>,
}

/// What the request side reads: the table and the ports the router serves.
#[derive(Debug, Clone)]
pub(crate) struct GatewayState {
    /// The compiled objects.
    pub(crate) table: GatewayTable,
    /// The objects themselves, for the debug dump.
    pub(crate) objects: GatewayObjects,
    /// The router's main inference port.
    pub(crate) port: u16,
    /// Whether HTTPRoute/InferencePool routing is on.
    pub(crate) inference_extension: bool,
    /// Gateway listener ports the router could not open, with the reason.
    pub(crate) bind_errors: HashMap<u16, String>,
}

/// The listener serving `host` on `port` (a request's [`ListenerPort`], else the main port).
///
/// # Errors
/// [`Error::NoMatchingListener`] (404) when no listener on the port serves the host.
pub(crate) fn listener_for<'a>(
    state: &'a GatewayState,
    port: Option<ListenerPort>,
    host: &str,
) -> Result<&'a CompiledListener, Error> {
    let port = port.map_or(state.port, |p| p.0);
    crate::routing::http_route::select_listener(&state.table.listeners, port, host)
        .ok_or(Error::NoMatchingListener)
}

/// Why a ModelRoute of `namespace` with `parents` serves no listener of `state` (Gateway
/// API mode: its `parentRefs` name none of them, or it has none and no served Gateway is
/// in its namespace); `None` when some listener serves it.
pub(crate) fn unattached(
    state: &GatewayState,
    namespace: &str,
    parents: &[kthena_api::networking::ParentReference],
) -> Option<String> {
    let listeners = &state.table.listeners;
    if listeners
        .iter()
        .any(|l| model_route_serves(namespace, parents, Some(l)))
    {
        return None;
    }
    Some(if parents.is_empty() {
        format!(
            "it has no parentRefs and no Gateway of class {GATEWAY_CLASS} served by this \
             router is in its namespace {namespace:?}: add a parentRef naming the Gateway"
        )
    } else {
        "its parentRefs name no listener of a Gateway this router serves".to_owned()
    })
}

/// The InferencePool chosen for a request no ModelRoute served.
#[derive(Debug, Clone)]
pub(crate) struct PoolChoice {
    /// `namespace/name` of the HTTPRoute.
    pub(crate) route: String,
    /// `namespace/name` of the InferencePool.
    pub(crate) pool_key: String,
    /// The InferencePool.
    pub(crate) pool: Pool,
    /// The path sent upstream (after `URLRewrite`).
    pub(crate) path: String,
    /// `URLRewrite.hostname`: the `Host` sent upstream.
    pub(crate) hostname: Option<String>,
}

/// The path a request to `path` on `host` (on listener port `port`) is parsed and sent
/// as when an HTTPRoute of its listener matches it: the path after the matched rule's
/// `URLRewrite`. `None` when the inference extension is off, no listener serves the host,
/// or no HTTPRoute matches (the request then needs a `/v1/` path, as outside Gateway API
/// mode).
pub(crate) fn effective_path(
    state: &GatewayState,
    port: Option<ListenerPort>,
    host: &str,
    path: &str,
) -> Option<String> {
    if !state.inference_extension {
        return None;
    }
    let listener = listener_for(state, port, host).ok()?;
    let m = crate::routing::http_route::best_match(&state.table.routes, listener, host, path)?;
    let rule = &m.route.rules[m.rule];
    Some(rule.rewrite.as_ref().map_or_else(
        || path.to_owned(),
        |rw| crate::routing::http_route::rewrite_path(path, rw, &m.prefix),
    ))
}

/// Routes `path` on `host` through the HTTPRoutes attached to `listener` to one of the
/// matched rule's InferencePools (weighted random, weights as written).
///
/// # Errors
/// `Ok(None)` when no HTTPRoute matches; [`Error::NoPoolBackend`] (503) for a rule without
/// InferencePool backends of weight above 0, [`Error::PoolNotFound`] (404).
pub(crate) fn choose_pool(
    state: &GatewayState,
    listener: &CompiledListener,
    host: &str,
    path: &str,
    rng: &mut impl Rng,
) -> Result<Option<PoolChoice>, Error> {
    let t = &state.table;
    let Some(m) = crate::routing::http_route::best_match(&t.routes, listener, host, path) else {
        return Ok(None);
    };
    let route = m.route.key();
    let rule = &m.route.rules[m.rule];
    let picked = crate::routing::weighted::pick(&rule.backends, rng).ok_or_else(|| {
        Error::NoPoolBackend {
            route: route.clone(),
        }
    })?;
    let pool = t.pools.get(picked).ok_or_else(|| Error::PoolNotFound {
        pool: picked.to_owned(),
    })?;
    let path = rule.rewrite.as_ref().map_or_else(
        || path.to_owned(),
        |rw| crate::routing::http_route::rewrite_path(path, rw, &m.prefix),
    );
    Ok(Some(PoolChoice {
        route,
        pool_key: picked.to_owned(),
        pool: pool.clone(),
        path,
        hostname: rule.rewrite.as_ref().and_then(|rw| rw.hostname.clone()),
    }))
}
