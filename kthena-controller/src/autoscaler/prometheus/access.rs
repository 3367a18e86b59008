//! What a Prometheus query needs besides its URL: the `Authorization` header from a
//! Secret (`auth.authorization` or `auth.basicAuth`) and, for an `https://` server, a TLS
//! client that trusts the system's roots or the CA of `tlsConfig.ca`. The field names are
//! the Prometheus Operator's (`SafeAuthorization`, `BasicAuth`, `SafeTLSConfig`); Go Kthena
//! v1.0.0 reserves `auth` and reads none of it (`pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use bytes::Bytes;
use http::HeaderValue;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kthena_api::workload::{KeySelector, PrometheusMetricSource};
use kube::Api;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

/// An HTTPS client with pooled connections.
pub(crate) type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// At most this many TLS clients are kept (one per distinct CA, server name and
/// verification); past it the cache starts over.
const MAX_TLS_CLIENTS: usize = 64;

/// The TLS settings of a query, with the CA's PEM bytes as read this round.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TlsKey {
    /// PEM certificates to trust instead of the system's roots.
    ca: Option<Vec<u8>>,
    /// Where the CA was read from, for messages.
    ca_from: Option<String>,
    /// The name to verify (and send as SNI) instead of the URL's host.
    server_name: Option<String>,
    /// Accept any server certificate.
    insecure: bool,
}

/// What [`resolve`] read for one query.
#[derive(Debug, Default)]
pub(crate) struct Access {
    /// The `Authorization` header, marked sensitive.
    pub(crate) authorization: Option<HeaderValue>,
    /// The TLS settings (used for `https://` servers only).
    pub(crate) tls: TlsKey,
}

/// A key of a Secret or ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyRef {
    kind: &'static str,
    namespace: String,
    name: String,
    key: String,
}

impl fmt::Display for KeyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            kind,
            namespace,
            name,
            key,
        } = self;
        write!(f, "{kind} {namespace}/{name} key {key:?}")
    }
}

/// Why the credentials or the CA of a source could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AccessError {
    /// The Secret or ConfigMap does not exist.
    #[error("{} {}/{} not found", .0.kind, .0.namespace, .0.name)]
    NotFound(KeyRef),
    /// It exists without that key.
    #[error("{0}: no such key")]
    NoKey(KeyRef),
    /// The value is not UTF-8 text (credentials and certificates are).
    #[error("{0}: not UTF-8 text")]
    NotText(KeyRef),
    /// The API server refused or failed the read (its whole cause chain in the message).
    #[error("reading {at}: {}", kthena_api::error_chain(source))]
    Api {
        /// What was read.
        at: KeyRef,
        /// The API error.
        source: kube::Error,
    },
    /// The credentials contain bytes no header may carry (a control character).
    #[error("{0}: not usable in an HTTP header")]
    Header(KeyRef),
}

/// Why no TLS client could be built for a source.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// `tlsConfig.ca` holds no PEM certificate, or one rustls refuses.
    #[error("CA certificate from {0}: no usable PEM certificate")]
    BadCa(String),
    /// The system has no root certificates and no CA is given.
    #[error("no system root certificates for https (set tlsConfig.ca)")]
    NoRoots,
    /// `tlsConfig.serverName` is neither a DNS name nor an IP address.
    #[error("tlsConfig.serverName {0:?} is not a DNS name or IP address")]
    ServerName(String),
    /// The TLS library refused the protocol versions.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Reads one key of a Secret or ConfigMap in `namespace` as text.
async fn read(
    kube: &kube::Client,
    kind: &'static str,
    namespace: &str,
    sel: &KeySelector,
) -> Result<String, AccessError> {
    let at = KeyRef {
        kind,
        namespace: namespace.to_owned(),
        name: sel.name.clone(),
        key: sel.key.clone(),
    };
    let bytes = if kind == "Secret" {
        let api: Api<Secret> = Api::namespaced(kube.clone(), namespace);
        let secret = api.get_opt(&sel.name).await;
        let secret = secret.map_err(|e| AccessError::Api {
            at: at.clone(),
            source: e,
        })?;
        let secret = secret.ok_or_else(|| AccessError::NotFound(at.clone()))?;
        let data = secret.data.unwrap_or_default();
        data.get(&sel.key).map(|b| b.0.clone())
    } else {
        let api: Api<ConfigMap> = Api::namespaced(kube.clone(), namespace);
        let cm = api.get_opt(&sel.name).await;
        let cm = cm.map_err(|e| AccessError::Api {
            at: at.clone(),
            source: e,
        })?;
        let cm = cm.ok_or_else(|| AccessError::NotFound(at.clone()))?;
        cm.data
            .unwrap_or_default()
            .get(&sel.key)
            .map(|s| s.clone().into_bytes())
    };
    let bytes = bytes.ok_or_else(|| AccessError::NoKey(at.clone()))?;
    String::from_utf8(bytes).map_err(|_| AccessError::NotText(at))
}

/// The header value `text`, sensitive; `at` names its source in the error.
fn header(text: &str, at: KeyRef) -> Result<HeaderValue, AccessError> {
    let mut v = HeaderValue::from_str(text).map_err(|_| AccessError::Header(at))?;
    v.set_sensitive(true);
    Ok(v)
}

fn secret_ref(namespace: &str, sel: &KeySelector) -> KeyRef {
    KeyRef {
        kind: "Secret",
        namespace: namespace.to_owned(),
        name: sel.name.clone(),
        key: sel.key.clone(),
    }
}

/// The `Authorization` header of `source`: `<type> <credentials>` (type `Bearer` when
/// unset) or `Basic base64(<username>:<password>)`, the Secret values without their
/// trailing line break; `None` without `auth`. A validated policy has at most one of the two
/// and every key selector set; a missing one sends no header.
async fn authorization(
    kube: &kube::Client,
    namespace: &str,
    source: &PrometheusMetricSource,
) -> Result<Option<HeaderValue>, AccessError> {
    let Some(auth) = &source.auth else {
        return Ok(None);
    };
    let trim = |s: String| s.trim_end_matches(['\r', '\n']).to_owned();
    if let Some(a) = &auth.authorization
        && let Some(cred) = &a.credentials
    {
        let token = trim(read(kube, "Secret", namespace, cred).await?);
        let scheme = a.type_.as_deref().unwrap_or("Bearer");
        return header(&format!("{scheme} {token}"), secret_ref(namespace, cred)).map(Some);
    }
    if let Some(b) = &auth.basic_auth
        && let (Some(u), Some(p)) = (&b.username, &b.password)
    {
        let user = trim(read(kube, "Secret", namespace, u).await?);
        let pass = trim(read(kube, "Secret", namespace, p).await?);
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        return header(&format!("Basic {encoded}"), secret_ref(namespace, u)).map(Some);
    }
    Ok(None)
}

/// Reads what a query of `source` needs from the policy's `namespace`: the Secret keys of
/// `auth` and the CA of `tlsConfig.ca`, each round (a rotated Secret is used at once).
///
/// # Errors
/// An [`AccessError`] naming the Secret or ConfigMap key: absent object or key, not text,
/// an API error, or credentials no header can carry.
pub(crate) async fn resolve(
    kube: &kube::Client,
    namespace: &str,
    source: &PrometheusMetricSource,
) -> Result<Access, AccessError> {
    let authorization = authorization(kube, namespace, source).await?;
    let mut tls = TlsKey::default();
    if let Some(t) = &source.tls_config {
        tls.server_name.clone_from(&t.server_name);
        tls.insecure = t.insecure_skip_verify.unwrap_or(false);
        if let Some(ca) = &t.ca {
            let from = match (&ca.secret, &ca.config_map) {
                (Some(s), _) => Some(("Secret", s)),
                (None, Some(c)) => Some(("ConfigMap", c)),
                (None, None) => None,
            };
            if let Some((kind, sel)) = from {
                tls.ca = Some(read(kube, kind, namespace, sel).await?.into_bytes());
                tls.ca_from = Some(format!("{kind} {namespace}/{} key {:?}", sel.name, sel.key));
            }
        }
    }
    Ok(Access { authorization, tls })
}

/// The TLS clients of the Prometheus sources, one per distinct [`TlsKey`], so that
/// connections are reused between rounds.
#[derive(Debug, Default)]
pub(crate) struct TlsClients(Mutex<HashMap<TlsKey, HttpsClient>>);

impl TlsClients {
    /// The client for `key`, built on first use.
    ///
    /// # Errors
    /// A [`TlsError`] when the CA, the server name or the system's roots are unusable.
    pub(crate) fn client(&self, key: &TlsKey) -> Result<HttpsClient, TlsError> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = map.get(key) {
            return Ok(c.clone());
        }
        let client = build(key)?;
        if map.len() >= MAX_TLS_CLIENTS {
            map.clear();
        }
        map.insert(key.clone(), client.clone());
        Ok(client)
    }
}

/// The trusted roots: the certificates of `key.ca`, else the system's.
fn roots(key: &TlsKey) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(pem) = &key.ca {
        let bad = || TlsError::BadCa(key.ca_from.clone().unwrap_or_default());
        for cert in CertificateDer::pem_slice_iter(pem) {
            roots.add(cert.map_err(|_| bad())?).map_err(|_| bad())?;
        }
        if roots.is_empty() {
            return Err(bad());
        }
        return Ok(roots);
    }
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "Reading the system's TLS root certificates");
    }
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    Ok(roots)
}

fn build(key: &TlsKey) -> Result<HttpsClient, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let config = if key.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(key)?)
            .with_no_client_auth()
    };
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only();
    let conn = match &key.server_name {
        Some(name) => {
            let fixed = ServerName::try_from(name.clone())
                .map_err(|_| TlsError::ServerName(name.clone()))?;
            conn.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(fixed))
        }
        None => conn,
    };
    let conn = conn.enable_http1().build();
    Ok(Client::builder(hyper_util::rt::TokioExecutor::new()).build(conn))
}

/// `insecureSkipVerify`: accepts any server certificate, still checks handshake signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
