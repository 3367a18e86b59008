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

/// What the request side reads: the table and the ports the router serves.
#[derive(Debug, Clone)]
pub(crate) struct GatewayState {
    /// The compiled objects.
    pub(crate) table: GatewayTable,
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
    }))
}
