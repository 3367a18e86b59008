//! The crate's error type.

/// Errors of the webhook server and its certificate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done (`reading secret ns/name`).
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A JSON patch could not be encoded.
    #[error("encoding the caBundle patch: {0}")]
    Encode(#[source] serde_json::Error),
    /// The webhook server could not listen.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
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
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps a client error with what was being done.
pub(crate) fn kube_err(action: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { action, source }
}
