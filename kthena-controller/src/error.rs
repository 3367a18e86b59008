//! The crate's error type.

/// Errors of the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed (shown with [`kube_message`]).
    #[error("{action}: {}", kube_message(source))]
    Kube {
        /// What was being done (`creating pod ns/name`).
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Roles could not be serialized for hashing.
    #[error("encoding the roles: {0}")]
    Encode(#[source] serde_json::Error),
    /// Roles hold a value that has no Go-identical revision hash.
    #[error("hashing the roles as Go Kthena does: {0}")]
    GoHash(#[from] crate::serving::revision::gohash::GoHashError),
    /// A `--controllers` entry names no controller.
    #[error(
        "unknown controller {0:?} in --controllers (known: modelserving, modelbooster, autoscaler)"
    )]
    UnknownController(String),
    /// The health endpoint could not listen.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The leader-election Lease could not be read or written.
    #[error("leader election: {0}")]
    Lease(#[source] kube_lease_manager::LeaseManagerError),
    /// This replica stopped holding the leader-election Lease.
    #[error("lost the leader-election lease")]
    LostLease,
    /// A plugin of `spec.plugins` could not be built or one of its hooks failed.
    #[error(transparent)]
    Plugin(#[from] crate::serving::plugins::PluginError),
    /// Children owned by another ModelServing of the same name exist; retried later.
    #[error("{0} is owned by another ModelServing with the same name")]
    Foreign(String),
    /// A ModelBooster worker's `port` is not a port (Go `GetEnginePort`).
    #[error("invalid port {port:?} for worker {worker}")]
    EnginePort {
        /// Worker type (`server`, `prefill`, `decode`).
        worker: String,
        /// The value as written.
        port: String,
    },
    /// A ModelBooster's serving workers name different engine ports.
    #[error("workers use different engine ports: {first} and {second}")]
    EnginePortMismatch {
        /// The port of the earlier workers.
        first: i32,
        /// The port of this worker.
        second: i32,
    },
    /// More than one prefill (or decode) worker in a ModelBooster backend.
    #[error(
        "backend {backend}: found {count} {worker} workers, expected at most 1; duplicate {worker} workers are not supported"
    )]
    DuplicateWorkers {
        /// Backend name.
        backend: String,
        /// `prefill` or `decode`.
        worker: &'static str,
        /// How many there are.
        count: usize,
    },
    /// A worker's `kv-transfer-config` is not a JSON object string.
    #[error("worker {worker}: invalid kv-transfer-config: {reason}")]
    InvalidKvTransferConfig {
        /// Worker type.
        worker: &'static str,
        /// What is wrong (`must be a JSON string`, the JSON error).
        reason: String,
    },
    /// A worker's `kv-transfer-config` lacks `kv_connector` or `kv_role`.
    #[error("worker {worker}: kv-transfer-config is set but {field} is missing")]
    KvTransferFieldMissing {
        /// Worker type.
        worker: &'static str,
        /// `kv_connector` or `kv_role`.
        field: &'static str,
    },
    /// A `kv_connector` Kthena does not map to a connector type.
    #[error(
        "worker {worker}: unsupported kv_connector {connector:?} (supported: LMCacheConnectorV1, MooncakeConnector, MooncakeConnectorV1, NixlConnector)"
    )]
    UnsupportedKvConnector {
        /// Worker type.
        worker: &'static str,
        /// The connector named.
        connector: String,
    },
    /// A `kv_role` that does not fit the worker (prefill: `kv_producer`/`kv_both`, decode:
    /// `kv_consumer`/`kv_both`).
    #[error("worker {worker}: invalid kv_role {role:?}, expected one of [{allowed}]")]
    InvalidKvRole {
        /// Worker type.
        worker: &'static str,
        /// The role named.
        role: String,
        /// The roles allowed, comma-separated.
        allowed: &'static str,
    },
    /// Only one of prefill and decode names a kv connector.
    #[error(
        "backend {backend}: {side} worker specifies kv_connector {connector:?} but the {other} worker has no kv-transfer-config; prefill and decode must configure the same kv connector"
    )]
    KvConnectorOneSided {
        /// Backend name.
        backend: String,
        /// The worker that names one.
        side: &'static str,
        /// Its connector.
        connector: String,
        /// The worker that names none.
        other: &'static str,
    },
    /// Prefill and decode name different kv connectors.
    #[error(
        "backend {backend}: kv_connector mismatch between prefill ({prefill:?}) and decode ({decode:?}) workers; prefill and decode must use the same kv connector"
    )]
    KvConnectorMismatch {
        /// Backend name.
        backend: String,
        /// Prefill's connector.
        prefill: String,
        /// Decode's connector.
        decode: String,
    },
    /// A ModelBooster backend lacks the worker its type needs (Go `BuildModelServing`).
    #[error("{worker} worker not found in backend: {backend}")]
    MissingWorker {
        /// Backend name.
        backend: String,
        /// `server`, `prefill` or `decode`.
        worker: &'static str,
    },
    /// A ModelBooster `cacheURI` that is neither `pvc://` nor `hostpath://`.
    #[error("not support prefix in CacheURI: {0}")]
    CacheUri(String),
    /// A generated object does not decode (a worker `config` that is not an object, ...).
    #[error("generating the ModelServing: {0}")]
    Template(String),
    /// An AutoscalingPolicy the scaling math cannot use (an unparsable duration, quantity or
    /// ratio, a ratio constraint on an unknown role).
    #[error(transparent)]
    Autoscale(#[from] kthena_autoscale::Error),
    /// An autoscaling `targetRef.kind` other than empty or `ModelServing` (the kind as
    /// written, `None` when unset).
    #[error("kind {0:?} is not ModelServing")]
    TargetKind(Option<String>),
    /// An autoscaling `targetRef` without a name.
    #[error("targetRef.name is empty")]
    TargetNameEmpty,
    /// The ModelServing an AutoscalingPolicy targets does not exist.
    #[error("ModelServing {namespace}/{name} not found")]
    TargetNotFound {
        /// Namespace of the target.
        namespace: String,
        /// Name of the target.
        name: String,
    },
    /// A role of a disaggregated AutoscalingPolicy is not a role of its ModelServing.
    #[error("ModelServing {namespace}/{name} has no role {role}")]
    TargetRoleMissing {
        /// Namespace of the target.
        namespace: String,
        /// Name of the target.
        name: String,
        /// The role the policy names.
        role: String,
    },
    /// Another, older AutoscalingPolicy already scales the same ModelServing (the same
    /// field: `spec.replicas`, or its roles' replicas); this one is not applied.
    #[error(
        "ModelServing {target} is already scaled by AutoscalingPolicy {by}, the older of the two; \
         this policy is not applied while both target it"
    )]
    TargetClaimed {
        /// `namespace/name` of the ModelServing.
        target: String,
        /// `namespace/name` of the policy that scales it.
        by: String,
    },
    /// `--router-metrics-service` is not `<namespace>/<name>`.
    #[error("--router-metrics-service {0:?}: expected <namespace>/<name>")]
    RouterMetricsService(String),
    /// A reconcile's API calls did not finish in time; retried.
    #[error("reconcile timed out after {0:?}")]
    Timeout(std::time::Duration),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The text of a kube error in logs and conditions: for an API error, the API server's own
/// message and status code (kube's `Display` appends a debug dump of the whole `Status`),
/// for a 404 without a `Status` body (a resource the API server does not serve) a hint
/// that its CRD is missing; a connection failure says the API server cannot be reached;
/// other errors as kube shows them.
pub(crate) fn kube_message(e: &kube::Error) -> String {
    let kube::Error::Api(s) = e else {
        return match e {
            kube::Error::Service(_) | kube::Error::HyperError(_) => {
                format!("cannot reach the API server: {e}{}", cause(e))
            }
            _ => e.to_string(),
        };
    };
    if s.code == 404 && s.message.contains("page not found") {
        return "the API server does not serve this resource (404 page not found): \
                is its CRD installed?"
            .to_owned();
    }
    match (s.message.trim(), s.reason.as_str()) {
        ("", "") => format!("HTTP {}", s.code),
        ("", reason) => format!("{reason} (HTTP {})", s.code),
        (message, _) => format!("{message} (HTTP {})", s.code),
    }
}

/// `: <innermost cause>` of `e`'s source chain (`Connection refused (os error 111)`), or
/// nothing when `e` has no source.
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let text = kthena_api::root_cause(e).to_string();
    if text.is_empty() || e.to_string().contains(&text) {
        return String::new();
    }
    format!(": {text}")
}

/// The text of a watch error in logs: the inner API error as [`kube_message`] shows it.
pub(crate) fn watch_message(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as W;
    match e {
        W::InitialListFailed(k) => format!("listing: {}", kube_message(k)),
        W::WatchStartFailed(k) | W::WatchFailed(k) => format!("watching: {}", kube_message(k)),
        W::WatchError(s) => format!("watching: {} (HTTP {})", s.message, s.code),
        W::NoResourceVersion => e.to_string(),
    }
}

/// Maps a kube error to [`Error::Kube`] with `action`.
pub(crate) fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

pub(crate) use kthena_webhook::rejection;

#[cfg(test)]
mod tests;
