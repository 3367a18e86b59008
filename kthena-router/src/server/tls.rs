//! HTTPS on the inference listener (`--tls-cert`/`--tls-key`, the `tls:` section): the
//! rustls server configuration from PEM files, as Go's router serves
//! `ListenAndServeTLS(cert, key)` (`cmd/kthena-router/app/router.go`). HTTP/2 and
//! HTTP/1.1 are offered by ALPN; a client that speaks plain HTTP to the port fails the
//! handshake and is closed.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::error::{Error, Result};

/// A listener's TLS acceptor.
#[derive(Clone)]
pub(crate) struct Https(pub(crate) TlsAcceptor);

impl std::fmt::Debug for Https {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Https")
    }
}

/// The acceptor of the certificate chain `cert_file` (PEM, leaf first) and its private key
/// `key_file` (PEM; the `tls:` section's files).
///
/// # Errors
/// [`Error::Config`] naming the file that cannot be read or parsed, or the pair rustls
/// refuses (a key that does not match the certificate).
pub(crate) fn acceptor(cert_file: &Path, key_file: &Path) -> Result<Https> {
    let err = |path: &Path, reason: String| Error::Config {
        path: path.to_owned(),
        reason: format!("tls: {reason}"),
    };
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| err(path, format!("cannot read the file: {e}")))
    };
    let cert_pem = read(cert_file)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| err(cert_file, format!("not a PEM certificate: {e}")))?;
    if chain.is_empty() {
        return Err(err(cert_file, "no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(key_file)?)
        .map_err(|e| err(key_file, format!("not a PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(cert_file, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| err(cert_file, e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Https(TlsAcceptor::from(Arc::new(config))))
}

#[cfg(test)]
mod tests;
