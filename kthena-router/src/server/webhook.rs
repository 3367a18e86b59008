//! The router's validating webhook, as Go's `kthena-router` serves it with `--enable-webhook`
//! (Go `cmd/kthena-router/app/webhook.go`; the configuration is Go's chart
//! `charts/networking/templates/kthena-router/component/validating-webhook.yaml`):
//! ModelRoute, ModelServer and ExternalModelProvider reviews on `--webhook-port`, over TLS
//! with the certificate of the files or of the Secret `--cert-secret-name` (created when
//! missing), whose CA is written into `kthena-router-validating-webhook`'s `caBundle`.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::error::Result;

/// Go's ValidatingWebhookConfiguration of the router.
pub const ROUTER_VALIDATING_WEBHOOK: &str = "kthena-router-validating-webhook";

/// Where and with which certificate the router's webhook is served (Go's router flags).
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// `--webhook-port` (0 picks a free port); bound on all addresses.
    pub port: u16,
    /// `--webhook-tls-cert-file` and `--webhook-tls-private-key-file`: used when both exist.
    pub files: (PathBuf, PathBuf),
    /// `--cert-secret-name`: the Secret every replica shares (empty: none).
    pub secret: String,
    /// `--webhook-service-name`: the Service a generated certificate is for.
    pub service: String,
    /// The namespace of the Secret and the Service (`POD_NAMESPACE`; else the client's).
    pub namespace: Option<String>,
}

/// Starts the webhook: returns the bound address and the future that serves it (until
/// dropped). The `caBundle` of [`ROUTER_VALIDATING_WEBHOOK`] is patched when that
/// configuration exists; a failed patch is logged, not fatal (the chart may carry the CA).
///
/// # Errors
/// [`crate::Error::Kube`] without a cluster configuration; [`crate::Error::Webhook`] when
/// the certificate is unusable or the port cannot be bound.
pub async fn serve_router_webhook(
    opts: &WebhookOptions,
) -> Result<(SocketAddr, impl Future<Output = ()> + use<>)> {
    let client = crate::discovery::cluster::connect().await?;
    let ns = opts
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let hosts = kthena_webhook::service_hosts(&opts.service, &ns);
    let source = kthena_webhook::CertificateSource {
        files: (&opts.files.0, &opts.files.1),
        secret: &opts.secret,
        namespace: &ns,
        hosts: &hosts,
    };
    let cert = kthena_webhook::certificate(&client, source).await?;
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, opts.port));
    let (addr, server) = kthena_webhook::serve_webhook(
        addr,
        &cert,
        kthena_webhook::WEBHOOK_TIMEOUT,
        kthena_webhook::ROUTER_PATHS,
        kthena_webhook::review,
    )
    .await?;
    tracing::info!(%addr, "Serving the validating webhook of ModelRoute, ModelServer and ExternalModelProvider");
    if let Err(e) =
        kthena_webhook::patch_ca_bundle(&client, &cert.ca_pem, ROUTER_VALIDATING_WEBHOOK, None)
            .await
    {
        tracing::warn!(error = %e, "Cannot write the webhook's caBundle");
    }
    Ok((addr, server))
}
