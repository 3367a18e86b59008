//! The crate's error type.

/// Errors of the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("{action}: {source}")]
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
    /// The webhook certificate could not be generated.
    #[error("generating the webhook certificate: {0}")]
    Certificate(#[source] rcgen::Error),
    /// A webhook certificate or key file could not be read.
    #[error("reading {}: {source}", path.display())]
    CertFile {
        /// The file.
        path: std::path::PathBuf,
        /// The read error.
        #[source]
        source: std::io::Error,
    },
    /// The webhook certificate Secret lacks a key.
    #[error("secret {secret} has no {key}")]
    IncompleteSecret {
        /// `namespace/name` of the Secret.
        secret: String,
        /// The missing key (`tls.crt`, `tls.key`, `ca.crt`).
        key: String,
    },
    /// A webhook certificate or key is not valid PEM.
    #[error("webhook certificate: {0}")]
    Pem(#[source] tokio_rustls::rustls::pki_types::pem::Error),
    /// The TLS configuration was refused (key does not match the certificate, ...).
    #[error("webhook TLS: {0}")]
    Tls(#[source] tokio_rustls::rustls::Error),
    /// Children owned by another ModelServing of the same name exist; retried later.
    #[error("{0} is owned by another ModelServing with the same name")]
    Foreign(String),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps a kube error to [`Error::Kube`] with `action`.
pub(crate) fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}
