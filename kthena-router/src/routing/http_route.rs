//! Pure Gateway API matching (Go Kthena `pkg/kthena-router/router/httproute_match.go`):
//! listener selection by port and host, HTTPRoute attachment (`parentRefs`, listener
//! `allowedRoutes`), hostname and path matching with the Gateway API's precedence, the
//! `URLRewrite` filter and the weighted InferencePool pick.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use kthena_api::networking::ParentReference;
use regex::Regex;

/// A listener of a Gateway of class `kthena-router`.
#[derive(Debug, Clone)]
pub(crate) struct CompiledListener {
    /// Namespace of the Gateway.
    pub(crate) gateway_namespace: String,
    /// Name of the Gateway.
    pub(crate) gateway_name: String,
    /// Listener name.
    pub(crate) name: String,
    /// Listener port.
    pub(crate) port: u16,
    /// Lower-cased hostname without a trailing dot; `None` matches every host.
    pub(crate) hostname: Option<String>,
    /// `allowedRoutes.namespaces.from`.
    pub(crate) from: AllowedFrom,
}

impl CompiledListener {
    /// `namespace/name` of the Gateway, the routing context.
    pub(crate) fn gateway_key(&self) -> String {
        format!("{}/{}", self.gateway_namespace, self.gateway_name)
    }
}

/// `allowedRoutes.namespaces` of a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllowedFrom {
    /// Routes of the Gateway's namespace (the default).
    Same,
    /// Routes of every namespace.
    All,
    /// `from: Selector`: routes of the namespaces whose labels the selector matched when
    /// the table was compiled (none for an invalid or missing selector).
    Selector(BTreeSet<String>),
}

/// A path predicate.
#[derive(Debug, Clone)]
pub(crate) enum PathMatch {
    /// The whole path equals the value.
    Exact(String),
    /// Segment-based prefix, stored without trailing slashes (`""` is `/`).
    Prefix(String),
    /// Unanchored search (Go `regexp.MatchString`).
    Regex(Regex),
}

impl PathMatch {
    /// Compiles a `path` predicate (`type` default `PathPrefix`, `value` default `/`).
    /// `None` for an unknown type or an invalid expression (the match never selects).
    pub(crate) fn compile(type_: Option<&str>, value: Option<&str>) -> Option<Self> {
        let value = value.unwrap_or("/");
        match type_.unwrap_or("PathPrefix") {
            "Exact" => Some(Self::Exact(value.to_owned())),
            "PathPrefix" => Some(Self::Prefix(value.trim_end_matches('/').to_owned())),
            "RegularExpression" => Regex::new(value).ok().map(Self::Regex),
            _ => None,
        }
    }

    /// Whether `path` matches, with the rank and the matched prefix (for
    /// `ReplacePrefixMatch`).
    pub(crate) fn matches(&self, path: &str) -> Option<(PathRank, String)> {
        match self {
            Self::Exact(v) => (path == v).then(|| (PathRank::new(3, v.len()), String::new())),
            Self::Prefix(p) if p.is_empty() => path
                .starts_with('/')
                .then(|| (PathRank::new(2, 1), "/".to_owned())),
            Self::Prefix(p) => {
                let hit = path == p
                    || path
                        .strip_prefix(p.as_str())
                        .is_some_and(|rest| rest.starts_with('/'));
                hit.then(|| (PathRank::new(2, p.len()), p.clone()))
            }
            Self::Regex(r) => r
                .is_match(path)
                .then(|| (PathRank::new(1, 0), String::new())),
        }
    }
}

/// Path specificity: kind (Exact 3 > PathPrefix 2 > RegularExpression 1), then length of
/// the value (bytes). Greater is more specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PathRank {
    kind: u8,
    len: usize,
}

impl PathRank {
    fn new(kind: u8, len: usize) -> Self {
        Self { kind, len }
    }
}

/// Host specificity of a route: exact hostname 2 > wildcard 1 (longer first) > no
/// hostnames 0. Greater is more specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct HostRank {
    kind: u8,
    len: usize,
}

/// The `URLRewrite` filter of a rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rewrite {
    /// Host sent upstream.
    pub(crate) hostname: Option<String>,
    /// `ReplaceFullPath` value.
    pub(crate) full_path: Option<String>,
    /// `ReplacePrefixMatch` value.
    pub(crate) prefix: Option<String>,
}

/// A compiled HTTPRoute rule.
#[derive(Debug, Clone)]
pub(crate) struct CompiledHttpRule {
    /// Path predicates by match index; `None` for matches that never select (method,
    /// header or query predicates, which Kthena does not evaluate, or a bad path).
    pub(crate) matches: Vec<Option<PathMatch>>,
    /// The first `URLRewrite` filter.
    pub(crate) rewrite: Option<Rewrite>,
    /// InferencePool backends `namespace/name` with weights above 0.
    pub(crate) backends: Vec<(String, u32)>,
}

/// A compiled HTTPRoute; a table keeps them oldest first (then `namespace/name`).
#[derive(Debug, Clone)]
pub(crate) struct CompiledHttpRoute {
    /// Namespace.
    pub(crate) namespace: String,
    /// Name.
    pub(crate) name: String,
    /// Lower-cased hostnames without trailing dots.
    pub(crate) hostnames: Vec<String>,
    /// Parents.
    pub(crate) parents: Vec<ParentReference>,
    /// Rules.
    pub(crate) rules: Vec<CompiledHttpRule>,
}

impl CompiledHttpRoute {
    /// `namespace/name`.
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The request host without port, brackets and trailing dot, lower-cased.
pub(crate) fn normalize_host(host: &str) -> String {
    let host = host.trim();
    let host = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match host.rsplit_once(':') {
            Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        }
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether a hostname pattern (exact, or `*.suffix` with a non-empty prefix) matches a
/// normalized host. `*.example.com` matches `a.b.example.com`, not `example.com`.
pub(crate) fn hostname_matches(pattern: &str, host: &str) -> bool {
    if pattern == host {
        return true;
    }
    pattern
        .strip_prefix('*')
        .filter(|s| s.starts_with('.'))
        .and_then(|suffix| host.strip_suffix(suffix))
        .is_some_and(|prefix| !prefix.is_empty())
}

/// The listener on `port` serving `host`: an exact hostname, else the longest matching
/// wildcard, else a listener without hostname (first in table order).
pub(crate) fn select_listener<'a>(
    listeners: &'a [CompiledListener],
    port: u16,
    host: &str,
) -> Option<&'a CompiledListener> {
    let host = normalize_host(host);
    let on_port = || listeners.iter().filter(move |l| l.port == port);
    on_port()
        .find(|l| l.hostname.as_deref() == Some(host.as_str()))
        .or_else(|| {
            on_port()
                .filter(|l| {
                    l.hostname
                        .as_deref()
                        .is_some_and(|h| h.starts_with("*.") && hostname_matches(h, &host))
                })
                .max_by_key(|l| l.hostname.as_ref().map_or(0, String::len))
        })
        .or_else(|| on_port().find(|l| l.hostname.is_none()))
}

/// Whether `route` attaches to `listener`: a parentRef names the listener
/// ([`parent_matches`]) and the listener's `allowedRoutes` admits the route's namespace.
pub(crate) fn attaches(route: &CompiledHttpRoute, listener: &CompiledListener) -> bool {
    let allowed = match &listener.from {
        AllowedFrom::All => true,
        AllowedFrom::Same => route.namespace == listener.gateway_namespace,
        AllowedFrom::Selector(namespaces) => namespaces.contains(&route.namespace),
    };
    allowed
        && route
            .parents
            .iter()
            .any(|p| parent_matches(p, &route.namespace, listener))
}

/// Whether parentRef `p` of a route in `route_ns` names `listener`: group
/// `gateway.networking.k8s.io`, kind `Gateway` (both the defaults), the listener's Gateway
/// (namespace default `route_ns`), and `sectionName` and `port` equal to the listener's
/// when set.
pub(crate) fn parent_matches(
    p: &ParentReference,
    route_ns: &str,
    listener: &CompiledListener,
) -> bool {
    p.group.as_deref().unwrap_or("gateway.networking.k8s.io") == "gateway.networking.k8s.io"
        && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
        && p.namespace.as_deref().unwrap_or(route_ns) == listener.gateway_namespace
        && p.name == listener.gateway_name
        && p.section_name.as_ref().is_none_or(|s| *s == listener.name)
        && p.port.is_none_or(|port| port == i32::from(listener.port))
}

/// Whether a ModelRoute of `namespace` with `parents` serves a request that came through `listener`
/// (`None` outside Gateway API mode), as Go Kthena's `MatchModelServer` decides
/// (`pkg/kthena-router/datastore/store.go`): with parentRefs, only through a listener one of them
/// names; without, only outside Gateway API mode or through a Gateway of the route's namespace.
pub(crate) fn model_route_serves(
    namespace: &str,
    parents: &[ParentReference],
    listener: Option<&CompiledListener>,
) -> bool {
    match listener {
        None => parents.is_empty(),
        Some(l) if parents.is_empty() => namespace == l.gateway_namespace,
        Some(l) => parents.iter().any(|p| parent_matches(p, namespace, l)),
    }
}

/// Why a ModelRoute of `namespace` with `parents` does not serve a request that came
/// through `listener` (when [`model_route_serves`] says it does not), and what would attach
/// it: the reason of the 404 a client gets.
pub(crate) fn why_not_attached(
    namespace: &str,
    parents: &[ParentReference],
    listener: Option<&CompiledListener>,
) -> String {
    let Some(l) = listener else {
        return "its parentRefs bind it to a Gateway and Gateway API mode is off (enable it \
                with --enable-gateway-api, or remove the parentRefs)"
            .to_owned();
    };
    let gateway = l.gateway_key();
    if parents.is_empty() {
        return format!(
            "it has no parentRefs, so it attaches only to Gateways of its own namespace \
             {namespace:?}, and this request came through listener {:?} of Gateway {gateway} \
             (add a parentRef naming Gateway {gateway})",
            l.name
        );
    }
    let named: Vec<String> = parents.iter().map(|p| parent_text(p, namespace)).collect();
    format!(
        "its parentRefs ({}) do not name listener {:?} of Gateway {gateway}, which this \
         request came through",
        named.join(", "),
        l.name
    )
}

/// A parentRef as `namespace/name`, with `/sectionName` and `:port` when set, and its
/// kind when not a Gateway.
fn parent_text(p: &ParentReference, route_ns: &str) -> String {
    let ns = p.namespace.as_deref().unwrap_or(route_ns);
    let section = p
        .section_name
        .as_ref()
        .map(|x| format!("/{x}"))
        .unwrap_or_default();
    let port = p.port.map(|x| format!(":{x}")).unwrap_or_default();
    let kind = match p.kind.as_deref().unwrap_or("Gateway") {
        "Gateway" => String::new(),
        k => format!("{k} "),
    };
    format!("{kind}{ns}/{}{section}{port}", p.name)
}

/// How specifically `route` serves the normalized `host`; `None` when it does not.
pub(crate) fn host_rank(route: &CompiledHttpRoute, host: &str) -> Option<HostRank> {
    if route.hostnames.is_empty() {
        return Some(HostRank { kind: 0, len: 0 });
    }
    route
        .hostnames
        .iter()
        .filter(|h| hostname_matches(h, host))
        .map(|h| HostRank {
            kind: if h.starts_with("*.") { 1 } else { 2 },
            len: h.len(),
        })
        .max()
}

/// A selected rule.
#[derive(Debug, Clone)]
pub(crate) struct HttpRouteMatch<'a> {
    /// The route.
    pub(crate) route: &'a CompiledHttpRoute,
    /// Index of the rule in the route.
    pub(crate) rule: usize,
    /// The PathPrefix that matched (`""` for Exact and RegularExpression).
    pub(crate) prefix: String,
}

/// Precedence key: host rank, path rank (both greater first), then route order, rule
/// index, match index (smaller first).
type Key = (HostRank, PathRank, usize, usize, usize);

fn better(a: &Key, b: &Key) -> bool {
    let ord = b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2));
    ord.then(a.3.cmp(&b.3)).then(a.4.cmp(&b.4)) == Ordering::Less
}

/// The best rule of the routes (oldest first) attached to `listener` for `host` and `path`, by the
/// Gateway API's HTTPRoute precedence
/// (<https://gateway-api.sigs.k8s.io/reference/spec/#httprouterule>). Rules without matches behave
/// as PathPrefix `/`.
pub(crate) fn best_match<'a>(
    routes: &'a [CompiledHttpRoute],
    listener: &CompiledListener,
    host: &str,
    path: &str,
) -> Option<HttpRouteMatch<'a>> {
    let host = normalize_host(host);
    let root = [Some(PathMatch::Prefix(String::new()))];
    let mut best: Option<(Key, HttpRouteMatch<'a>)> = None;
    for (ri, route) in routes.iter().enumerate() {
        let Some(hr) = host_rank(route, &host).filter(|_| attaches(route, listener)) else {
            continue;
        };
        for (rule, r) in route.rules.iter().enumerate() {
            let matches = if r.matches.is_empty() {
                &root[..]
            } else {
                &r.matches[..]
            };
            for (mi, m) in matches.iter().enumerate() {
                let Some((pr, prefix)) = m.as_ref().and_then(|m| m.matches(path)) else {
                    continue;
                };
                let key = (hr, pr, ri, rule, mi);
                if best.as_ref().is_none_or(|(k, _)| better(&key, k)) {
                    best = Some((
                        key,
                        HttpRouteMatch {
                            route,
                            rule,
                            prefix,
                        },
                    ));
                }
            }
        }
    }
    best.map(|(_, m)| m)
}

/// The path sent upstream after a rule's `URLRewrite`: `ReplaceFullPath` replaces the
/// whole path; `ReplacePrefixMatch` replaces the matched prefix (`/v1` + `/v2`:
/// `/v1/chat` becomes `/v2/chat`; replacing with `/` keeps one slash).
pub(crate) fn rewrite_path(path: &str, rw: &Rewrite, matched_prefix: &str) -> String {
    if let Some(full) = &rw.full_path {
        return full.clone();
    }
    let Some(repl) = &rw.prefix else {
        return path.to_owned();
    };
    let rest = if matched_prefix == "/" {
        path
    } else {
        path.strip_prefix(matched_prefix).unwrap_or(path)
    };
    let out = format!("{}{rest}", repl.trim_end_matches('/'));
    if out.is_empty() {
        "/".to_owned()
    } else if out.starts_with('/') {
        out
    } else {
        format!("/{out}")
    }
}

#[cfg(test)]
mod tests;
