//! The one builder of TLS clients: external providers and JWKS fetches use it.
//!
//! Roots are the system's (`rustls-native-certs`); `insecure` accepts any server certificate
//! but still checks handshake signatures (`insecureSkipVerify` of an
//! ExternalModelProvider). Redirects are never followed (hyper's client does not).

use std::sync::{Arc, OnceLock};

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// An HTTPS (and, for [`Scheme::HttpsOrHttp`], plain HTTP) client with pooled connections.
pub(crate) type HttpsClient = Client<HttpsConnector<HttpConnector>, super::ReqBody>;

/// Which URL schemes a client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `https://` only (external providers).
    HttpsOnly,
    /// `https://` and `http://` (JWKS URIs).
    HttpsOrHttp,
}

/// Why a TLS client could not be built.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum TlsError {
    /// The TLS library refused the protocol versions (a build without TLS 1.2/1.3).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// Certificates must be verified and the system has no root certificates.
    #[error("no system root certificates for https")]
    NoRoots,
}

/// The process's client for `scheme` and `insecure`, built once on first use.
///
/// # Errors
/// [`TlsError`] when the client cannot be built (then every later call fails the same way).
pub(crate) fn client(scheme: Scheme, insecure: bool) -> Result<&'static HttpsClient, TlsError> {
    static CELLS: [OnceLock<Result<HttpsClient, TlsError>>; 4] = [const { OnceLock::new() }; 4];
    let i = usize::from(insecure) * 2 + usize::from(scheme == Scheme::HttpsOrHttp);
    CELLS[i]
        .get_or_init(|| build(scheme, insecure))
        .as_ref()
        .map_err(Clone::clone)
}

fn build(scheme: Scheme, insecure: bool) -> Result<HttpsClient, TlsError> {
    let p = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&p))
        .with_safe_default_protocol_versions()?;
    let tls = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(p)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "Reading the system's TLS root certificates");
        }
        roots.add_parsable_certificates(found.certs);
        if roots.is_empty() {
            return Err(TlsError::NoRoots);
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let conn = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let conn = match scheme {
        Scheme::HttpsOnly => conn.https_only().enable_http1().build(),
        Scheme::HttpsOrHttp => conn.https_or_http().enable_http1().build(),
    };
    Ok(Client::builder(TokioExecutor::new()).build(conn))
}
/// `insecureSkipVerify`: accepts any server certificate, still checks handshake signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
