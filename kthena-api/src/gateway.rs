//! Minimal types of the Gateway API kinds the router reads and writes status on:
//! [`GatewayClass`], [`Gateway`] and [`HTTPRoute`] (`gateway.networking.k8s.io/v1`,
//! <https://gateway-api.sigs.k8s.io/reference/spec/>).
//!
//! Own types instead of the `gateway-api` crate: its 0.22 release pins `kube` 4 and
//! `k8s-openapi` 0.28, the workspace uses `kube` 5 and `k8s-openapi` 0.29. Only the fields
//! Kthena uses are typed; unknown fields are dropped on read, so status is written with
//! merge patches of the typed fields only. The CRDs are the official standard-channel ones
//! (v1.6.3), not generated from these types.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::networking::ParentReference;

/// Spec of a `GatewayClass` (cluster-scoped): the controller that implements its Gateways.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "GatewayClass",
    plural = "gatewayclasses",
    status = "GatewayClassStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "GatewayClass names the controller of a class of Gateways (Gateway API)."
)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    /// Controller name, `volcano.sh/kthena-router` for Kthena.
    pub controller_name: String,
}

/// Status of a `GatewayClass`: its conditions (`Accepted`, written by its controller).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassStatus {
    /// `Accepted` (the API server defaults it to `Unknown`/`Pending` until a controller
    /// writes it).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Spec of a `Gateway`: its class and listeners.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "Gateway",
    plural = "gateways",
    namespaced,
    status = "GatewayStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Gateway is a set of listeners routes attach to (Gateway API)."
)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The GatewayClass; Kthena serves `kthena-router`.
    pub gateway_class_name: String,
    /// Listeners (1 to 64).
    #[serde(default)]
    pub listeners: Vec<Listener>,
}

/// One listener of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Name, unique in the Gateway.
    pub name: String,
    /// Hostname (exact or `*.suffix`); unset matches every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Port (1..=65535).
    pub port: i32,
    /// `HTTP`, `HTTPS`, `TLS`, `TCP`, `UDP`.
    pub protocol: String,
    /// Which routes may attach; unset means routes of the Gateway's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `allowedRoutes` of a listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// Namespaces routes may come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<RouteNamespaces>,
}

/// `allowedRoutes.namespaces` of a listener.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// `Same` (the default), `All` or `Selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// With `from: Selector`: the label selector (`matchLabels`, `matchExpressions`) over
    /// namespaces, kept as JSON (a `metav1.LabelSelector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<serde_json::Value>,
}

/// Status of a `Gateway`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// `Accepted`, `Programmed`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// One entry per listener.
    #[serde(default)]
    pub listeners: Vec<ListenerStatus>,
}

/// Status of one listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The listener's name.
    pub name: String,
    /// Route kinds the listener supports (`HTTPRoute`).
    #[serde(default)]
    pub supported_kinds: Vec<RouteGroupKind>,
    /// Routes attached to the listener.
    #[serde(default)]
    pub attached_routes: i32,
    /// `Accepted`, `Programmed`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A route kind and its group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// API group, `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind, `HTTPRoute`.
    pub kind: String,
}

/// Spec of an `HTTPRoute`: parents, hostnames and rules.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    plural = "httproutes",
    namespaced,
    status = "HTTPRouteStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "HTTPRoute routes HTTP requests of Gateways' listeners to backends (Gateway API)."
)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// Gateways (or listeners of them) the route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Hosts the route serves (exact or `*.suffix`); empty serves every host.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Rules; the CRD defaults one rule matching PathPrefix `/`.
    #[serde(default)]
    pub rules: Vec<HTTPRouteRule>,
}

/// One rule of an HTTPRoute.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteRule {
    /// Matches, any of which selects the rule; empty means PathPrefix `/`.
    #[serde(default)]
    pub matches: Vec<HTTPRouteMatch>,
    /// Filters (`URLRewrite` is applied).
    #[serde(default)]
    pub filters: Vec<HTTPRouteFilter>,
    /// Weighted backends.
    #[serde(default)]
    pub backend_refs: Vec<HTTPBackendRef>,
}

/// One match of a rule; all its predicates must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteMatch {
    /// Path predicate; unset means PathPrefix `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathMatch>,
    /// Header predicates (Kthena skips matches that have any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub headers: Vec<serde_json::Value>,
    /// Query predicates (Kthena skips matches that have any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub query_params: Vec<serde_json::Value>,
    /// Method predicate (Kthena skips matches that have one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}

/// Path predicate of a match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathMatch {
    /// `Exact`, `PathPrefix` (the default) or `RegularExpression`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The path, prefix or expression; unset means `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A filter of a rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteFilter {
    /// `URLRewrite`, `RequestHeaderModifier`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// The `URLRewrite` filter's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_rewrite: Option<HTTPURLRewriteFilter>,
}

/// `urlRewrite` of a filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPURLRewriteFilter {
    /// Host sent upstream instead of the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Path rewrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathModifier>,
}

/// Path rewrite of a `URLRewrite` filter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The new path (`ReplaceFullPath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_full_path: Option<String>,
    /// What replaces the matched prefix (`ReplacePrefixMatch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

/// A weighted backend of a rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPBackendRef {
    /// API group; unset means the core group (a Service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind; unset means `Service`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the referent.
    pub name: String,
    /// Namespace; unset means the route's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Port (Services).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Relative weight; unset means 1, 0 means no traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// Status of an `HTTPRoute`: one entry per parent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteStatus {
    /// Per-parent status.
    #[serde(default)]
    pub parents: Vec<RouteParentStatus>,
}

/// Status of a route for one parent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent, as in the spec.
    pub parent_ref: ParentReference,
    /// Controller that wrote the entry (`volcano.sh/kthena-router`).
    pub controller_name: String,
    /// `Accepted`, `ResolvedRefs`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
