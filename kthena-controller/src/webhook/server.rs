//! The TLS admission webhook server: a certificate from files or generated at start, the CA
//! bundle patched into the webhook configurations, and [`crate::webhook::admission::review`] behind
//! every path of [`admission::PATHS`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::response::IntoResponse as _;
use axum::routing::{get, post};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

use crate::error::{Error, Result, kube_err};
use crate::webhook::admission::{self, Action};

/// Go's ValidatingWebhookConfiguration name (`kthena-controller-manager-validating-webhook`).
pub const VALIDATING_WEBHOOK: &str = "kthena-controller-manager-validating-webhook";
/// Go's MutatingWebhookConfiguration name (`kthena-controller-manager-mutating-webhook`).
pub const MUTATING_WEBHOOK: &str = "kthena-controller-manager-mutating-webhook";
/// Go's webhook Service name (`--service-name` default).
pub const SERVICE_NAME: &str = "kthena-controller-manager-webhook";

/// Go's Secret holding the generated webhook certificate (`--cert-secret-name` default).
pub const CERT_SECRET_NAME: &str = "kthena-controller-manager-webhook-certs";

/// A serving certificate in PEM: the chain, its private key and the CA that signed it (what
/// goes into `caBundle`).
#[derive(Clone)]
pub struct Certificate {
    /// `tls.crt`: the serving certificate (PEM).
    pub cert_pem: String,
    /// `tls.key`: its private key (PEM).
    pub key_pem: String,
    /// `ca.crt`: the CA certificate to trust (PEM); equal to `cert_pem` for a file pair
    /// without a CA file.
    pub ca_pem: String,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate").finish_non_exhaustive()
    }
}

/// DNS names Go's certificate covers for a Service: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`,
/// `<svc>.<ns>.svc.cluster.local`; plus `localhost` and `127.0.0.1` for local runs.
pub fn service_hosts(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ]
}

/// Generates a CA (`kthena-webhook-ca`) and a serving certificate for `hosts` signed by it
/// (ECDSA P-256; Go uses RSA 2048, which the API server accepts alike).
///
/// # Errors
/// [`Error::Certificate`] if generation fails.
pub fn generate_certificate(hosts: &[String]) -> Result<Certificate> {
    let ca_key = rcgen::KeyPair::generate().map_err(Error::Certificate)?;
    let mut ca_params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(Error::Certificate)?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kthena-webhook-ca");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).map_err(Error::Certificate)?;
    let key = rcgen::KeyPair::generate().map_err(Error::Certificate)?;
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(Error::Certificate)?;
    if let Some(first) = hosts.first() {
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, first.as_str());
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca).map_err(Error::Certificate)?;
    Ok(Certificate {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        ca_pem: ca.pem(),
    })
}

/// Reads `--tls-cert-file` and `--tls-private-key-file`; `caBundle` is the certificate file
/// itself (the chain's root when it holds several certificates).
///
/// # Errors
/// [`Error::CertFile`] if a file cannot be read.
pub fn load_certificate(cert: &Path, key: &Path) -> Result<Certificate> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| Error::CertFile {
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    Ok(Certificate {
        key_pem: read(key)?,
        ca_pem: cert_pem.clone(),
        cert_pem,
    })
}

/// The certificate every replica shares, as Go's `--cert-secret-name`: read from the Secret
/// `namespace/name` (keys `tls.crt`, `tls.key`, `ca.crt`), or generated for `hosts` and
/// created there when it does not exist. When two replicas race, the one whose create fails
/// with AlreadyExists reads the other's, so both serve the same certificate and `caBundle`.
///
/// # Errors
/// [`Error::Kube`] if the Secret cannot be read or created; [`Error::IncompleteSecret`] if
/// it lacks a key; [`Error::Certificate`] if generation fails.
pub async fn secret_certificate(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    hosts: &[String],
) -> Result<Certificate> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let read = |secret: &Secret| from_secret(secret, namespace, name);
    if let Some(secret) = api
        .get_opt(name)
        .await
        .map_err(kube_err(format!("reading secret {namespace}/{name}")))?
    {
        return read(&secret);
    }
    let cert = generate_certificate(hosts)?;
    let data = [
        ("tls.crt", &cert.cert_pem),
        ("tls.key", &cert.key_pem),
        ("ca.crt", &cert.ca_pem),
    ];
    let secret = Secret {
        metadata: kube::core::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| {
                    (
                        k.to_owned(),
                        k8s_openapi::ByteString(v.clone().into_bytes()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(cert),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = api
                .get(name)
                .await
                .map_err(kube_err(format!("reading secret {namespace}/{name}")))?;
            read(&secret)
        }
        Err(e) => Err(kube_err(format!("creating secret {namespace}/{name}"))(e)),
    }
}

fn from_secret(secret: &Secret, namespace: &str, name: &str) -> Result<Certificate> {
    let key = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| Error::IncompleteSecret {
                secret: format!("{namespace}/{name}"),
                key: k.to_owned(),
            })
    };
    Ok(Certificate {
        cert_pem: key("tls.crt")?,
        key_pem: key("tls.key")?,
        ca_pem: key("ca.crt")?,
    })
}

fn tls_config(cert: &Certificate) -> Result<ServerConfig> {
    let chain = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Pem)?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(Error::Pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(Error::Tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Go's `--webhook-timeout` default: 30 s.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// `fut`'s output if it finishes within `limit` (`None`: no limit).
async fn within<F: Future>(limit: Option<Duration>, fut: F) -> Option<F::Output> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, fut).await.ok(),
        None => Some(fut.await),
    }
}

fn router(timeout: Option<Duration>) -> Router {
    let mut app = Router::new().route("/healthz", get(|| async { "ok" }));
    for &(path, action) in admission::PATHS {
        app = app.route(path, post(move |body: Bytes| handle(action, body)));
    }
    // Reading the request (body included) and answering it within `timeout`.
    app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| async move {
            match within(timeout, next.run(req)).await {
                Some(response) => response,
                None => http::StatusCode::REQUEST_TIMEOUT.into_response(),
            }
        },
    ))
}

async fn handle(action: Action, body: Bytes) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    (
        [("content-type", "application/json")],
        admission::review(action, &body),
    )
}

/// Binds `addr` and returns the bound address and a future serving the webhooks over TLS
/// with `cert` (plus `GET /healthz`) until it is dropped.
///
/// `timeout` is Go's `--webhook-timeout` (its server's read and write timeouts, default
/// [`WEBHOOK_TIMEOUT`]): the TLS handshake, each request's headers (also the wait for the
/// next request on a kept-alive connection) and each request's body with its answer must
/// each finish within it; a connection that is too slow is closed, a request that is too
/// slow gets `408 Request Timeout`. Zero means no timeout, as for Go's `http.Server`.
///
/// # Errors
/// [`Error::Listen`] if the address cannot be bound; [`Error::Pem`] / [`Error::Tls`] if the
/// certificate or key is unusable.
pub async fn serve_webhook(
    addr: SocketAddr,
    cert: &Certificate,
    timeout: Duration,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>)> {
    let acceptor = TlsAcceptor::from(Arc::new(tls_config(cert)?));
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| Error::Listen { addr, source })?;
    let timeout = (!timeout.is_zero()).then_some(timeout);
    let app = router(timeout);
    Ok((local, async move {
        // Connections end with the server (dropping the set aborts them).
        let mut connections = tokio::task::JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let Ok((tcp, peer)) = listener.accept().await else {
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            connections.spawn(async move {
                let tls = match within(timeout, acceptor.accept(tcp)).await {
                    Some(Ok(tls)) => tls,
                    None => {
                        tracing::debug!(%peer, "webhook TLS handshake timed out");
                        return;
                    }
                    Some(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                        return;
                    }
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let mut builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                builder
                    .http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(timeout);
                if let Err(e) = builder
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%peer, error = %e, "webhook connection ended");
                }
            });
        }
    }))
}

/// Writes `ca_pem` as the `caBundle` of every webhook of the ValidatingWebhookConfiguration
/// `validating` and the MutatingWebhookConfiguration `mutating` (JSON patches of
/// `/webhooks/<i>/clientConfig/caBundle`), as Go's controller-manager does at start. A
/// configuration that does not exist is skipped.
///
/// # Errors
/// [`Error::Kube`] if a configuration cannot be read or patched.
pub async fn patch_ca_bundle(
    client: &kube::Client,
    ca_pem: &str,
    validating: &str,
    mutating: &str,
) -> Result<()> {
    let ca = Bytes::from(ca_pem.to_owned());
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(cfg) = vapi
        .get_opt(validating)
        .await
        .map_err(kube_err(format!("reading {validating}")))?
    {
        let n = cfg.webhooks.map_or(0, |w| w.len());
        patch_bundle(&vapi, validating, n, &ca).await?;
    }
    let mapi: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(cfg) = mapi
        .get_opt(mutating)
        .await
        .map_err(kube_err(format!("reading {mutating}")))?
    {
        let n = cfg.webhooks.map_or(0, |w| w.len());
        patch_bundle(&mapi, mutating, n, &ca).await?;
    }
    Ok(())
}

async fn patch_bundle<K>(api: &Api<K>, name: &str, webhooks: usize, ca: &Bytes) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let encoded =
        serde_json::to_value(k8s_openapi::ByteString(ca.to_vec())).map_err(Error::Encode)?;
    let ops: Vec<serde_json::Value> = (0..webhooks)
        .map(|i| {
            serde_json::json!({
                "op": "add",
                "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                "value": encoded,
            })
        })
        .collect();
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).map_err(Error::Encode)?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(kube_err(format!("patching the caBundle of {name}")))?;
    tracing::info!(name, webhooks, "patched the webhook caBundle");
    Ok(())
}
