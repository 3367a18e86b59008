//! The statuses Go Kthena writes (`controller/gateway_controller.go`,
//! `controller/httproute_controller.go`): Gateway `Accepted`/`Programmed` with per-listener
//! conditions, HTTPRoute per-parent `Accepted`/`ResolvedRefs`. A condition keeps its
//! `lastTransitionTime` while status, reason and message stay the same.

use std::collections::HashMap;

use kthena_api::gateway::{
    Gateway, GatewayClass, GatewayClassStatus, GatewayStatus, HTTPRoute, HTTPRouteStatus, Listener,
    ListenerStatus, RouteGroupKind, RouteParentStatus,
};
use kthena_api::networking::ParentReference;

use super::table::GatewayTable;
use super::{CONTROLLER_NAME, GATEWAY_CLASS};
use crate::conditions::{cond, keep_times, same_conditions};

/// Message of the `Accepted` condition of a GatewayClass the router controls.
pub(crate) const CLASS_ACCEPTED: &str = "GatewayClass has been accepted by kthena-router";

/// The status to write on GatewayClass `class`, as the Gateway API asks of the controller
/// of a class (`GatewayClassStatus`): `Accepted=True` (reason `Accepted`) with the class's
/// `observedGeneration`, other conditions kept. `None` when the router is not its
/// controller (`spec.controllerName` other than [`CONTROLLER_NAME`]) or the condition is
/// already written for this generation.
pub(crate) fn gateway_class_status(class: &GatewayClass) -> Option<GatewayClassStatus> {
    if class.spec.controller_name != CONTROLLER_NAME {
        return None;
    }
    let g = class.metadata.generation;
    let old = class.status.clone().unwrap_or_default();
    let accepted = cond("Accepted", true, "Accepted", CLASS_ACCEPTED.into(), g);
    let written = old.conditions.iter().any(|c| {
        c.type_ == "Accepted"
            && c.status == "True"
            && c.reason == accepted.reason
            && c.message == accepted.message
            && c.observed_generation == g
    });
    if written {
        return None;
    }
    let mut conditions = keep_times(&old.conditions, vec![accepted]);
    conditions.extend(old.conditions.into_iter().filter(|c| c.type_ != "Accepted"));
    Some(GatewayClassStatus { conditions })
}

/// The status of a Gateway of class `kthena-router`; a listener whose port could not be
/// opened (`bind_errors`, by port) fails.
pub(crate) fn gateway_status(
    gw: &Gateway,
    table: &GatewayTable,
    bind_errors: &HashMap<u16, String>,
) -> GatewayStatus {
    let g = gw.metadata.generation;
    let old = gw.status.clone().unwrap_or_default();
    let accepted = gw.spec.gateway_class_name == GATEWAY_CLASS;
    let programmed = programmed(gw, accepted, bind_errors);
    let conditions = vec![
        if accepted {
            cond(
                "Accepted",
                true,
                "Accepted",
                "Gateway has been accepted by kthena-router".into(),
                g,
            )
        } else {
            cond(
                "Accepted",
                false,
                "NotAccepted",
                "Gateway is not accepted: unknown GatewayClass".into(),
                g,
            )
        },
        cond("Programmed", programmed.0, programmed.1, programmed.2, g),
    ];
    let listeners = gw
        .spec
        .listeners
        .iter()
        .map(|l| listener_status(gw, l, &old, table, bind_errors))
        .collect();
    GatewayStatus {
        conditions: keep_times(&old.conditions, conditions),
        listeners,
    }
}

/// The bind error of a listener's port, if any.
fn listener_err(l: &Listener, bind_errors: &HashMap<u16, String>) -> Option<String> {
    u16::try_from(l.port)
        .ok()
        .and_then(|p| bind_errors.get(&p).cloned())
}

fn supported(protocol: &str) -> bool {
    protocol == "HTTP" || protocol == "HTTPS"
}

/// The Gateway's `Programmed` condition as (status, reason, message): the first listener
/// that failed to bind or uses an unsupported protocol makes it `Invalid`.
fn programmed(
    gw: &Gateway,
    accepted: bool,
    bind_errors: &HashMap<u16, String>,
) -> (bool, &'static str, String) {
    if !accepted {
        return (
            false,
            "Pending",
            "Waiting for Gateway to be accepted".to_owned(),
        );
    }
    for l in &gw.spec.listeners {
        if let Some(e) = listener_err(l, bind_errors) {
            return (
                false,
                "Invalid",
                format!("Listener {:?} failed: {e}", l.name),
            );
        }
        if !supported(&l.protocol) {
            return (
                false,
                "Invalid",
                format!(
                    "Listener {:?} uses unsupported protocol {}",
                    l.name, l.protocol
                ),
            );
        }
    }
    (
        true,
        "Programmed",
        "Gateway has been programmed by kthena-router".to_owned(),
    )
}

/// One listener's status: `Accepted` and `Programmed`, and the routes attached to it.
fn listener_status(
    gw: &Gateway,
    l: &Listener,
    old: &GatewayStatus,
    table: &GatewayTable,
    bind_errors: &HashMap<u16, String>,
) -> ListenerStatus {
    let g = gw.metadata.generation;
    let err = listener_err(l, bind_errors);
    let acc = match (&err, supported(&l.protocol)) {
        (None, true) => cond(
            "Accepted",
            true,
            "Accepted",
            "Listener has been accepted".into(),
            g,
        ),
        (Some(e), _) => cond(
            "Accepted",
            false,
            "PortUnavailable",
            format!("Listener failed to bind: {e}"),
            g,
        ),
        (None, false) => cond(
            "Accepted",
            false,
            "UnsupportedProtocol",
            format!("Protocol {} is not supported", l.protocol),
            g,
        ),
    };
    let prog = match &err {
        None => cond(
            "Programmed",
            true,
            "Programmed",
            "Listener has been programmed".into(),
            g,
        ),
        Some(e) => cond(
            "Programmed",
            false,
            "Invalid",
            format!("Listener failed to bind: {e}"),
            g,
        ),
    };
    let old_l = old.listeners.iter().find(|o| o.name == l.name);
    ListenerStatus {
        name: l.name.clone(),
        supported_kinds: vec![RouteGroupKind {
            group: Some("gateway.networking.k8s.io".into()),
            kind: "HTTPRoute".into(),
        }],
        attached_routes: i32::try_from(attached_routes(gw, l, table)).unwrap_or(i32::MAX),
        conditions: keep_times(old_l.map_or(&[][..], |o| &o.conditions), vec![acc, prog]),
    }
}

/// The HTTPRoutes of `table` attached to listener `l` of `gw`.
fn attached_routes(gw: &Gateway, l: &Listener, table: &GatewayTable) -> usize {
    let ns = gw.metadata.namespace.as_deref().unwrap_or_default();
    let name = gw.metadata.name.as_deref().unwrap_or_default();
    table
        .listeners
        .iter()
        .find(|c| c.gateway_namespace == ns && c.gateway_name == name && c.name == l.name)
        .map_or(0, |c| {
            table
                .routes
                .iter()
                .filter(|r| crate::routing::http_route::attaches(r, c))
                .count()
        })
}

/// Whether the status written would change anything Go compares.
pub(crate) fn gateway_status_changed(gw: &Gateway, new: &GatewayStatus) -> bool {
    let old = gw.status.clone().unwrap_or_default();
    !same_conditions(&old.conditions, &new.conditions)
        || old.listeners.len() != new.listeners.len()
        || old.listeners.iter().zip(&new.listeners).any(|(a, b)| {
            a.name != b.name
                || a.supported_kinds != b.supported_kinds
                || a.attached_routes != b.attached_routes
                || !same_conditions(&a.conditions, &b.conditions)
        })
}

/// The parents of `route` that are Gateways of class `kthena-router` (by `namespace/name`
/// in `kthena_gateways`).
pub(crate) fn route_status(
    route: &HTTPRoute,
    kthena_gateways: &[String],
    table: &GatewayTable,
) -> Option<HTTPRouteStatus> {
    let ns = route.metadata.namespace.clone().unwrap_or_default();
    let g = route.metadata.generation;
    let old = route.status.clone().unwrap_or_default();
    let mut parents: Vec<RouteParentStatus> = old
        .parents
        .iter()
        .filter(|p| p.controller_name != CONTROLLER_NAME)
        .cloned()
        .collect();
    let resolved = resolve_refs(route, &ns, table);
    let mut ours = 0;
    for p in &route.spec.parent_refs {
        let key = format!("{}/{}", p.namespace.as_deref().unwrap_or(&ns), p.name);
        if p.kind.as_deref().is_some_and(|k| k != "Gateway") || !kthena_gateways.contains(&key) {
            continue;
        }
        ours += 1;
        let conds = vec![
            cond(
                "Accepted",
                true,
                "Accepted",
                "HTTPRoute has been accepted by kthena-router".into(),
                g,
            ),
            cond(
                "ResolvedRefs",
                resolved.0,
                &resolved.1,
                resolved.2.clone(),
                g,
            ),
        ];
        let old_c = old
            .parents
            .iter()
            .find(|o| same_parent(&o.parent_ref, p, &ns))
            .map_or(&[][..], |o| &o.conditions[..]);
        parents.push(RouteParentStatus {
            parent_ref: p.clone(),
            controller_name: CONTROLLER_NAME.into(),
            conditions: keep_times(old_c, conds),
        });
    }
    (ours > 0).then_some(HTTPRouteStatus { parents })
}

/// Whether a route status differs from the stored one (by parent, controller and
/// conditions).
pub(crate) fn route_status_changed(route: &HTTPRoute, new: &HTTPRouteStatus) -> bool {
    let old = route.status.clone().unwrap_or_default();
    old.parents.len() != new.parents.len()
        || old.parents.iter().zip(&new.parents).any(|(a, b)| {
            a.parent_ref != b.parent_ref
                || a.controller_name != b.controller_name
                || !same_conditions(&a.conditions, &b.conditions)
        })
}

fn same_parent(a: &ParentReference, b: &ParentReference, ns: &str) -> bool {
    a.name == b.name
        && a.namespace.as_deref().unwrap_or(ns) == b.namespace.as_deref().unwrap_or(ns)
        && a.kind.as_deref().unwrap_or("Gateway") == b.kind.as_deref().unwrap_or("Gateway")
        && a.section_name == b.section_name
        && a.port == b.port
}

/// `(resolved, reason, message)`: every InferencePool backend exists (Services are not
/// checked, as in Go).
fn resolve_refs(route: &HTTPRoute, ns: &str, table: &GatewayTable) -> (bool, String, String) {
    for b in route.spec.rules.iter().flat_map(|r| &r.backend_refs) {
        if b.kind.as_deref() == Some("InferencePool") {
            let bns = b.namespace.as_deref().unwrap_or(ns);
            if !table.pools.contains_key(&format!("{bns}/{}", b.name)) {
                return (
                    false,
                    "BackendNotFound".into(),
                    format!("InferencePool {:?} not found in namespace {bns:?}", b.name),
                );
            }
        }
    }
    (
        true,
        "ResolvedRefs".into(),
        "All references resolved".into(),
    )
}

#[cfg(test)]
mod tests;
