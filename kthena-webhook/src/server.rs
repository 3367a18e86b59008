//! The TLS admission webhook server: [`crate::review`] behind each path of a path table
//! ([`crate::PATHS`] or [`crate::ROUTER_PATHS`]), and the CA bundle patched into the webhook
//! configurations.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::response::IntoResponse as _;
use axum::routing::{get, post};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, Patch, PatchParams};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

use crate::admission::{Action, Review};
use crate::cert::Certificate;
use crate::error::{Error, Result, kube_err};
use crate::reload::FileCertificate;

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

fn router(
    timeout: Option<Duration>,
    paths: &'static [(&'static str, Action)],
    review: Review,
) -> Router {
    let mut app = Router::new().route("/healthz", get(|| async { "ok" }));
    for &(path, action) in paths {
        app = app.route(path, post(move |body: Bytes| handle(review, action, body)));
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

async fn handle(
    review: Review,
    action: Action,
    body: Bytes,
) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    (
        [("content-type", "application/json")],
        review(action, &body),
    )
}

/// Binds `addr` and returns the bound address and a future serving `paths` (each
/// `(path, action)`, e.g. [`crate::PATHS`]) over TLS with `cert`, each answered by `review`
/// (e.g. [`crate::review`]), plus `GET /healthz`, until it is dropped.
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
    paths: &'static [(&'static str, Action)],
    review: Review,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>)> {
    serve(addr, tls_config(cert)?, timeout, paths, review).await
}

/// [`serve_webhook`] with the certificate and key of two PEM files, read again every
/// `reload` (cert-manager mode: cert-manager renews the Secret and the kubelet rewrites the
/// mounted files): a renewed pair is served from the next TLS handshake on, without a
/// restart; an unusable pair (half-written) keeps the previous one, with a warning.
///
/// # Errors
/// As [`serve_webhook`]; [`Error::CertFile`] if a file cannot be read at start.
pub async fn serve_webhook_files(
    addr: SocketAddr,
    files: (&std::path::Path, &std::path::Path),
    reload: Duration,
    timeout: Duration,
    paths: &'static [(&'static str, Action)],
    review: Review,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = Arc::new(FileCertificate::load(
        files.0,
        files.1,
        Arc::clone(&provider),
    )?);
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&certs) as Arc<dyn rustls::server::ResolvesServerCert>);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let (local, server) = serve(addr, config, timeout, paths, review).await?;
    let reloading = async move {
        let mut tick = tokio::time::interval(reload);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            certs.reload();
        }
    };
    Ok((local, async move {
        tokio::select! {
            () = server => {}
            () = reloading => {}
        }
    }))
}

/// The server of [`serve_webhook`] with TLS `config`.
async fn serve(
    addr: SocketAddr,
    config: ServerConfig,
    timeout: Duration,
    paths: &'static [(&'static str, Action)],
    review: Review,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>)> {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| Error::Listen { addr, source })?;
    let timeout = (!timeout.is_zero()).then_some(timeout);
    let app = router(timeout, paths, review);
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
/// `validating` and, when given, the MutatingWebhookConfiguration `mutating` (JSON patches of
/// `/webhooks/<i>/clientConfig/caBundle`), as Go's controller-manager and router do at
/// start. A configuration that does not exist is skipped.
///
/// # Errors
/// [`Error::Kube`] if a configuration cannot be read or patched.
pub async fn patch_ca_bundle(
    client: &kube::Client,
    ca_pem: &str,
    validating: &str,
    mutating: Option<&str>,
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
    let Some(mutating) = mutating else {
        return Ok(());
    };
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
