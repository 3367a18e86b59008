//! The Gateway API part of the debug dump (Go Kthena `pkg/kthena-router/debug/handlers.go`):
//! `GET /debug/config_dump/{gateways|httproutes|inferencepools}` answers
//! `{"<plural>": [{"name", "namespace", "spec", "status"}, ...]}` sorted by
//! `namespace/name` (`null` for none, as Go's empty slice encodes), and
//! `GET /debug/config_dump/namespaces/{ns}/{plural}/{name}` one such object, or 404
//! `{"error": "<Kind> not found"}`.

use serde::Serialize;
use serde_json::{Value, json};

use super::GatewayState;

/// `{"name", "namespace", "spec", "status"}` of an object (`status` `{}` when unset, as
/// Go's zero-valued status struct encodes).
fn entry<S: Serialize, T: Serialize>(
    meta: &kube::core::ObjectMeta,
    spec: &S,
    status: Option<&T>,
) -> Value {
    json!({
        "name": meta.name.as_deref().unwrap_or(""),
        "namespace": meta.namespace.as_deref().unwrap_or("default"),
        "spec": serde_json::to_value(spec).unwrap_or(Value::Null),
        "status": status.map_or_else(|| json!({}), |s| serde_json::to_value(s).unwrap_or(Value::Null)),
    })
}

/// The entries of kind `plural` (`gateways`, `httproutes`, `inferencepools`); `None` for
/// another kind. No state (Gateway API mode off) lists nothing.
fn entries(state: Option<&GatewayState>, plural: &str) -> Option<Vec<Value>> {
    let Some(o) = state.map(|s| &s.objects) else {
        return matches!(plural, "gateways" | "httproutes" | "inferencepools").then(Vec::new);
    };
    Some(match plural {
        "gateways" => o
            .gateways
            .iter()
            .map(|g| entry(&g.metadata, &g.spec, g.status.as_ref()))
            .collect(),
        "httproutes" => o
            .routes
            .iter()
            .map(|r| entry(&r.metadata, &r.spec, r.status.as_ref()))
            .collect(),
        "inferencepools" => o
            .pools
            .iter()
            .map(|p| entry(&p.metadata, &p.spec, p.status.as_ref()))
            .collect(),
        _ => return None,
    })
}

/// The kind name of `plural` in a 404 message.
fn kind_name(plural: &str) -> &'static str {
    match plural {
        "gateways" => "Gateway",
        "httproutes" => "HTTPRoute",
        _ => "InferencePool",
    }
}

/// The answer to a Gateway API dump path split into `parts` (after `/debug/config_dump/`):
/// `Some((found, body))`, or `None` when the path is not a Gateway API kind's.
pub(crate) fn config_dump(state: Option<&GatewayState>, parts: &[&str]) -> Option<(bool, Value)> {
    match parts {
        [plural] => {
            let list = entries(state, plural)?;
            let list = if list.is_empty() {
                Value::Null
            } else {
                Value::Array(list)
            };
            Some((true, json!({ *plural: list })))
        }
        ["namespaces", ns, plural, name] => {
            let found = entries(state, plural)?
                .into_iter()
                .find(|v| v["namespace"] == *ns && v["name"] == *name);
            Some(match found {
                Some(v) => (true, v),
                None => (
                    false,
                    json!({"error": format!("{} not found", kind_name(plural))}),
                ),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
