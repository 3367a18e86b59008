//! The load-time checks of a routing snapshot (see the `warnings` module): ModelRoute
//! targets that do not exist, endpoints no ModelServer selects, ModelServers without
//! endpoints, ModelRoutes bound to a Gateway outside Gateway API mode; the models without a
//! ready endpoint that `/readyz` lists; and the check that every manifest path exists.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use kthena_api::ModelRoute;

use super::{Server, Snapshot};
use crate::config::Config;
use crate::discovery::warnings::ConfigWarning;
use crate::error::{Error, Result};
use crate::upstream::endpoint::Endpoint;

/// Every warning of a snapshot, in a stable order (routes in table order, then servers and
/// endpoints by name).
pub(crate) fn check(
    routes: &[ModelRoute],
    servers: &HashMap<String, Arc<Server>>,
    providers: &HashMap<String, Arc<crate::provider::Provider>>,
    endpoints: &[Arc<Endpoint>],
) -> Vec<ConfigWarning> {
    let mut out = Vec::new();
    for r in routes {
        route_targets(r, servers, providers, &mut out);
    }
    let mut keys: Vec<&String> = servers.keys().collect();
    keys.sort();
    for k in &keys {
        let s = &servers[*k];
        if s.endpoints.is_empty() {
            let labels = &s.object.spec.workload_selector.match_labels;
            out.push(ConfigWarning {
                kind: "model_server_without_endpoints",
                message: format!(
                    "ModelServer {}: spec.workloadSelector.matchLabels {} selects no endpoint in \
                     namespace {}; requests routed to it are held until one appears \
                     (coldStart), or get 503 with coldStart.enabled: false",
                    s.key,
                    labels_text(labels),
                    s.namespace
                ),
            });
        }
    }
    for e in endpoints {
        let selected = servers
            .values()
            .any(|s| s.endpoints.iter().any(|x| Arc::ptr_eq(x, e)));
        if !selected {
            out.push(ConfigWarning {
                kind: "endpoint_not_selected",
                message: format!(
                    "endpoint {} (namespace {}, labels {}) is selected by no ModelServer; no \
                     request is sent to it",
                    e.name,
                    e.namespace,
                    labels_text(&e.labels)
                ),
            });
        }
    }
    out
}

/// A ModelRoute with `spec.parentRefs` outside Gateway API mode: it serves only requests
/// through the Gateways it names, so here it serves none.
pub(crate) fn needs_gateway(r: &ModelRoute) -> Option<ConfigWarning> {
    if r.spec.parent_refs.is_empty() {
        return None;
    }
    let ns = r.metadata.namespace.as_deref().unwrap_or("default");
    let name = r.metadata.name.as_deref().unwrap_or("");
    Some(ConfigWarning {
        kind: "route_needs_gateway_api",
        message: format!(
            "ModelRoute {ns}/{name}: spec.parentRefs binds it to a Gateway, and Gateway API \
             mode is off (it needs cluster mode with gatewayApi.enabled or \
             --enable-gateway-api); requests for model {:?} get 404",
            r.spec.model_name
        ),
    })
}

fn route_targets(
    r: &ModelRoute,
    servers: &HashMap<String, Arc<Server>>,
    providers: &HashMap<String, Arc<crate::provider::Provider>>,
    out: &mut Vec<ConfigWarning>,
) {
    let ns = r.metadata.namespace.as_deref().unwrap_or("default");
    let name = r.metadata.name.as_deref().unwrap_or("");
    for (i, rule) in r.spec.rules.iter().enumerate() {
        for (j, t) in rule.target_models.iter().enumerate() {
            let field = format!("spec.rules[{i}].targetModels[{j}]");
            if let Some(server) = &t.model_server_name {
                if servers.contains_key(&format!("{ns}/{server}")) {
                    continue;
                }
                let hint = closest(server, servers.values().filter(|s| s.namespace == ns))
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                out.push(ConfigWarning {
                    kind: "model_server_not_found",
                    message: format!(
                        "ModelRoute {ns}/{name}: {field}.modelServerName: ModelServer \
                         {ns}/{server} does not exist{hint}; requests for this target get 404"
                    ),
                });
            } else if let Some(p) = &t.external_model_provider_name
                && !providers.contains_key(&format!("{ns}/{p}"))
            {
                out.push(ConfigWarning {
                    kind: "external_provider_not_found",
                    message: format!(
                        "ModelRoute {ns}/{name}: {field}.externalModelProviderName: \
                         ExternalModelProvider {ns}/{p} does not exist; requests for this \
                         target get 404"
                    ),
                });
            }
        }
    }
}

/// The most similar server name (Jaro-Winkler ≥ 0.8, as for config keys).
fn closest<'a>(name: &str, servers: impl Iterator<Item = &'a Arc<Server>>) -> Option<&'a str> {
    servers
        .map(|s| (strsim::jaro_winkler(name, &s.name), s.name.as_str()))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n)
}

fn labels_text(labels: &std::collections::BTreeMap<String, String>) -> String {
    let parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

/// The model names and LoRA adapters (as in `GET /v1/models`) none of whose routes' target
/// ModelServers has an endpoint that is up (its last scrapes answered), sorted.
pub(crate) fn unready_models(snap: &Snapshot) -> Vec<String> {
    let mut ready: HashMap<&str, bool> = HashMap::new();
    for r in &snap.route_objects {
        let ns = r.metadata.namespace.as_deref().unwrap_or("default");
        let up = r
            .spec
            .rules
            .iter()
            .flat_map(|rule| &rule.target_models)
            .any(|t| {
                let server_up = t.model_server_name.as_ref().is_some_and(|s| {
                    snap.servers
                        .get(&format!("{ns}/{s}"))
                        .is_some_and(|s| s.endpoints.iter().any(|e| e.is_up()))
                });
                // An external provider has no endpoints to scrape: it counts once it
                // exists (its credential problems are answered per request).
                let provider = t
                    .external_model_provider_name
                    .as_ref()
                    .is_some_and(|p| snap.providers.contains_key(&format!("{ns}/{p}")));
                server_up || provider
            });
        let names = std::iter::once(r.spec.model_name.as_str())
            .filter(|n| !n.is_empty())
            .chain(r.spec.lora_adapters.iter().map(String::as_str));
        for n in names {
            *ready.entry(n).or_default() |= up;
        }
    }
    let mut out: Vec<String> = ready
        .into_iter()
        .filter(|(_, up)| !up)
        .map(|(n, _)| n.to_owned())
        .collect();
    out.sort();
    out
}
/// Every `standalone.manifests` path exists, else [`Error::Config`] naming the config file
/// and the entry: `standalone.manifests[1]: cannot read /etc/kthena/nothere: No such file
/// or directory (os error 2)`.
pub(crate) fn manifest_paths_exist(cfg: &Config, config_path: Option<&Path>) -> Result<()> {
    for (i, p) in cfg.manifest_paths().iter().enumerate() {
        if let Err(e) = std::fs::metadata(p) {
            return Err(Error::Config {
                path: config_path.map(Path::to_path_buf).unwrap_or_default(),
                reason: format!(
                    "standalone.manifests[{i}]: cannot read {}: {e}",
                    p.display()
                ),
            });
        }
    }
    Ok(())
}
