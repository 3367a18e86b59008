//! Request matching: ModelRoutes ([`model_route`]: model or LoRA adapter, rules, weighted
//! targets; Go Kthena `pkg/kthena-router/datastore/store.go`), Gateway API HTTPRoutes
//! ([`http_route`]: listeners, hostnames, paths, `URLRewrite`; Go Kthena
//! `pkg/kthena-router/router/httproute_match.go`) and the one weighted pick both use
//! ([`weighted`]).

pub(crate) mod http_route;
pub(crate) mod model_route;
pub(crate) mod weighted;

pub use model_route::{
    CompiledRoute, CompiledRule, MatchError, RouteMatch, RouteTable, StringMatcher, TargetRef,
};
