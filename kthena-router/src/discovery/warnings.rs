//! Load-time checks of a routing snapshot that do not stop it from loading but leave
//! something unserved: a ModelRoute target naming a ModelServer that does not exist, an
//! endpoint no ModelServer selects, a ModelServer that selects no endpoint, a target that is
//! an ExternalModelProvider, a misspelled (unknown, dropped) field of a manifest. Each is
//! logged at every load and reload, listed at `/debug/config_dump/warnings` and counted in
//! `kthena_router_config_warnings{kind}`. The checks themselves run in discovery, which
//! builds the snapshot.

use serde::Serialize;

/// The kinds of [`ConfigWarning`], the values of the metric's `kind` label (every kind is
/// exported, 0 when absent, so an alert can watch `> 0`).
pub(crate) const WARNING_KINDS: [&str; 6] = [
    "unknown_field",
    "model_server_not_found",
    "endpoint_not_selected",
    "model_server_without_endpoints",
    "external_provider_not_found",
    "route_needs_gateway_api",
];

/// One problem of the loaded configuration, in the words logged and dumped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigWarning {
    /// One of [`WARNING_KINDS`].
    pub kind: &'static str,
    /// What is wrong, with the object and field, and what requests see.
    pub message: String,
}

/// Logs every warning (at load and at each reload).
pub(crate) fn log(warnings: &[ConfigWarning]) {
    for w in warnings {
        tracing::warn!(kind = w.kind, "{}", w.message);
    }
}
