//! Prefill/decode disaggregated proxying (Go Kthena `proxyToPDDisaggregated` in
//! `pkg/kthena-router/router/router.go`, `pkg/kthena-router/connectors/*`): a ModelServer with a
//! `workloadSelector.pdGroup` sends every request to a prefill endpoint and a decode
//! endpoint of the same group, and its KV connector moves the KV cache between them.
//!
//! * The schedule stage calls [`pairs::schedule`]: `kthena-sched`'s `Scheduler::schedule_pd` ranks
//!   the decode endpoints and picks the best prefill endpoint of each one's group, leaving
//!   [`pairs::PdScheduled`] (pairs in decode rank order).
//! * The forward stage calls [`flow::forward`]: pairs are tried in order; a pair fails
//!   over to the next one only before the first response byte reached the client.
//! * The connector ([`Connector`]) decides the bodies ([`body`]) and the order: `http` and
//!   `lmcache` prefill then decode; `nixl` and `mooncake` do the same with vLLM's
//!   `kv_transfer_params` handshake; `sglang` sends both at once with a `bootstrap_room`.
//! * Phase metrics ([`metrics`]) carry Go Kthena's names.

// This module is a leaf (no `crate::` imports): discovery and metrics use its types, and the
// request path reaches `pairs` and `flow` by their own paths.
mod body;
pub(crate) mod flow;
pub(crate) mod metrics;
pub(crate) mod pairs;

use kthena_api::networking::{InferenceEngine, KvConnectorType, ModelServerSpec};
use kthena_sched::{EndpointId, PdRole};

/// How the KV cache moves from the prefill to the decode engine (Go Kthena's connector
/// factory, `pkg/kthena-router/connectors/factory.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// Plain two steps: prefill with `max_tokens: 1`, then decode (the engines' own KV
    /// connector does the transfer).
    Http,
    /// LMCache: the same two steps as [`Connector::Http`].
    Lmcache,
    /// vLLM's NixlConnector: the prefill answer's `kv_transfer_params` go into the decode
    /// request.
    Nixl,
    /// vllm-ascend's MooncakeConnector: the same handshake as [`Connector::Nixl`].
    Mooncake,
    /// SGLang: prefill and decode sent at once, tied by `bootstrap_room`; the decode
    /// request names the prefill engine in `bootstrap_host`.
    Sglang,
}

impl Connector {
    /// `spec.kvConnector.type` when set, else `sglang` for an SGLang engine, else `http`.
    #[must_use]
    pub fn of(spec: &ModelServerSpec) -> Self {
        match spec.kv_connector.as_ref().and_then(|k| k.type_) {
            Some(KvConnectorType::Http) => Self::Http,
            Some(KvConnectorType::Lmcache) => Self::Lmcache,
            Some(KvConnectorType::Nixl) => Self::Nixl,
            Some(KvConnectorType::Mooncake) => Self::Mooncake,
            None if spec.inference_engine == InferenceEngine::SgLang => Self::Sglang,
            None => Self::Http,
        }
    }

    /// Go Kthena's connector name (`http`, `lmcache`, `nixl`, `mooncake`, `sglang`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Lmcache => "lmcache",
            Self::Nixl => "nixl",
            Self::Mooncake => "mooncake",
            Self::Sglang => "sglang",
        }
    }

    /// Whether the decode request carries the prefill answer's `kv_transfer_params`.
    fn hands_over_params(self) -> bool {
        matches!(self, Self::Nixl | Self::Mooncake)
    }
}

/// The prefill/decode layout of a ModelServer with a `pdGroup`.
#[derive(Debug, Clone)]
pub struct PdLayout {
    /// The KV connector.
    pub connector: Connector,
    /// Every selected endpoint with a role and a group value.
    pub members: Vec<PdEndpoint>,
}

/// An endpoint's place in a prefill/decode group.
#[derive(Debug, Clone)]
pub struct PdEndpoint {
    /// The endpoint's id (`namespace/name`).
    pub id: EndpointId,
    /// Prefill or decode (decode when it matches `decodeLabels`, checked first).
    pub role: PdRole,
    /// The value of its `pdGroup.groupKey` label.
    pub group: String,
}

#[cfg(test)]
mod tests;
