//! Compiles the watched Gateway API objects into a [`GatewayTable`], the request side's
//! read-only view (rebuilt on every watch event, swapped atomically).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kthena_api::gateway::{Gateway, HTTPRoute, HTTPRouteRule, RouteNamespaces};
use kthena_api::thirdparty::InferencePool;
use kube::core::{Selector, SelectorExt};

use super::{GATEWAY_CLASS, INFERENCE_POOL_GROUP};
use crate::routing::http_route::{
    AllowedFrom, CompiledHttpRoute, CompiledHttpRule, CompiledListener, PathMatch, Rewrite,
};

/// An InferencePool: pods of `namespace` carrying every `match_labels` pair, on `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pool {
    /// Namespace.
    pub(crate) namespace: String,
    /// `spec.selector.matchLabels`.
    pub(crate) match_labels: BTreeMap<String, String>,
    /// `spec.targetPorts[0].number`; `None` without target ports.
    pub(crate) port: Option<u16>,
}

/// Listeners, HTTPRoutes and InferencePools the router serves.
#[derive(Debug, Clone, Default)]
pub(crate) struct GatewayTable {
    /// HTTP listeners of Gateways of class `kthena-router`, by Gateway `namespace/name`
    /// then listener order.
    pub(crate) listeners: Vec<CompiledListener>,
    /// HTTPRoutes, oldest first, then `namespace/name`.
    pub(crate) routes: Vec<CompiledHttpRoute>,
    /// InferencePools by `namespace/name`.
    pub(crate) pools: HashMap<String, Pool>,
}

fn ns_name(m: &kube::core::ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_else(|| "default".into()),
        m.name.clone().unwrap_or_default(),
    )
}

impl GatewayTable {
    /// Compiles the objects (Gateways of other classes and non-HTTP listeners are left out);
    /// `namespaces` are evaluated against the listeners' `allowedRoutes` selectors.
    pub(crate) fn compile(
        gateways: &[Arc<Gateway>],
        routes: &[Arc<HTTPRoute>],
        pools: &[Arc<InferencePool>],
        namespaces: &[Arc<Namespace>],
    ) -> Self {
        let mut gws: Vec<&Arc<Gateway>> = gateways
            .iter()
            .filter(|g| g.spec.gateway_class_name == GATEWAY_CLASS)
            .collect();
        gws.sort_by_key(|g| ns_name(&g.metadata));
        let listeners = gws
            .iter()
            .flat_map(|g| {
                let (ns, name) = ns_name(&g.metadata);
                g.spec
                    .listeners
                    .iter()
                    .filter(|l| l.protocol == "HTTP")
                    .filter_map(move |l| {
                        Some(CompiledListener {
                            gateway_namespace: ns.clone(),
                            gateway_name: name.clone(),
                            name: l.name.clone(),
                            port: u16::try_from(l.port).ok()?,
                            hostname: l.hostname.as_deref().map(lower_host),
                            from: allowed_from(
                                l.allowed_routes
                                    .as_ref()
                                    .and_then(|a| a.namespaces.as_ref()),
                                namespaces,
                            ),
                        })
                    })
            })
            .collect();
        let mut sorted: Vec<&Arc<HTTPRoute>> = routes.iter().collect();
        sorted.sort_by_key(|r| {
            (
                r.metadata.creation_timestamp.as_ref().map(|t| t.0),
                ns_name(&r.metadata),
            )
        });
        let routes = sorted.into_iter().map(|r| compile_route(r)).collect();
        let pools = pools
            .iter()
            .map(|p| {
                let (ns, name) = ns_name(&p.metadata);
                let pool = Pool {
                    namespace: ns.clone(),
                    match_labels: p.spec.selector.match_labels.clone(),
                    port: p
                        .spec
                        .target_ports
                        .first()
                        .and_then(|t| u16::try_from(t.number).ok()),
                };
                (format!("{ns}/{name}"), pool)
            })
            .collect();
        Self {
            listeners,
            routes,
            pools,
        }
    }
}

/// `allowedRoutes.namespaces` of a listener: `Same` when unset or unknown (the API
/// default), `All`, or `Selector` with the names of the namespaces its label selector
/// matches now (none when the selector is missing or invalid).
pub(crate) fn allowed_from(
    field: Option<&RouteNamespaces>,
    namespaces: &[Arc<Namespace>],
) -> AllowedFrom {
    match field.and_then(|f| f.from.as_deref()) {
        Some("All") => AllowedFrom::All,
        Some("Selector") => {
            let selector = field
                .and_then(|f| f.selector.clone())
                .and_then(|v| serde_json::from_value::<LabelSelector>(v).ok())
                .and_then(|ls| Selector::try_from(ls).ok());
            let picked = selector.map_or_else(Default::default, |sel| {
                namespaces
                    .iter()
                    .filter(|n| sel.matches(&n.metadata.labels.clone().unwrap_or_default()))
                    .filter_map(|n| n.metadata.name.clone())
                    .collect()
            });
            AllowedFrom::Selector(picked)
        }
        _ => AllowedFrom::Same,
    }
}

fn lower_host(h: &str) -> String {
    h.trim_end_matches('.').to_ascii_lowercase()
}

fn compile_route(r: &HTTPRoute) -> CompiledHttpRoute {
    let (namespace, name) = ns_name(&r.metadata);
    let rules = r
        .spec
        .rules
        .iter()
        .map(|rule| compile_rule(rule, &namespace))
        .collect();
    CompiledHttpRoute {
        hostnames: r.spec.hostnames.iter().map(|h| lower_host(h)).collect(),
        parents: r.spec.parent_refs.clone(),
        rules,
        namespace,
        name,
    }
}

fn compile_rule(rule: &HTTPRouteRule, namespace: &str) -> CompiledHttpRule {
    let matches = rule
        .matches
        .iter()
        .map(|m| {
            let constrained =
                m.method.is_some() || !m.headers.is_empty() || !m.query_params.is_empty();
            if constrained {
                return None;
            }
            match &m.path {
                None => PathMatch::compile(None, None),
                Some(p) => PathMatch::compile(p.type_.as_deref(), p.value.as_deref()),
            }
        })
        .collect();
    let rewrite = rule
        .filters
        .iter()
        .filter(|f| f.type_ == "URLRewrite")
        .find_map(|f| f.url_rewrite.as_ref())
        .map(|u| {
            let path = u.path.as_ref();
            let of = |t: &str| path.filter(|p| p.type_ == t);
            Rewrite {
                hostname: u.hostname.clone(),
                full_path: of("ReplaceFullPath").and_then(|p| p.replace_full_path.clone()),
                prefix: of("ReplacePrefixMatch").and_then(|p| p.replace_prefix_match.clone()),
            }
        });
    let backends = rule
        .backend_refs
        .iter()
        .filter(|b| {
            b.group.as_deref() == Some(INFERENCE_POOL_GROUP)
                && b.kind.as_deref() == Some("InferencePool")
        })
        .filter_map(|b| {
            let w = u32::try_from(b.weight.unwrap_or(1))
                .ok()
                .filter(|w| *w > 0)?;
            let ns = b.namespace.as_deref().unwrap_or(namespace);
            Some((format!("{ns}/{}", b.name), w))
        })
        .collect();
    CompiledHttpRule {
        matches,
        rewrite,
        backends,
    }
}
