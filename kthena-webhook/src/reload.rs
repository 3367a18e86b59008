//! The webhook certificate managed by cert-manager: the mounted `tls.crt`/`tls.key` served
//! and read again periodically (cert-manager renews the Secret, the kubelet rewrites the
//! mounted files), and the `caBundle` left to cert-manager's CA injector, which the webhook
//! configurations ask for with the annotation `cert-manager.io/inject-ca-from` (Go Kthena's
//! chart: `charts/kthena/charts/workload/templates/kthena-controller-manager/component/`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::Api;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;

use crate::error::{Error, Result, kube_err};

/// The annotations by which cert-manager's CA injector fills a webhook configuration's
/// `caBundle` (from a Certificate, or from a Secret).
pub const INJECT_CA_ANNOTATIONS: [&str; 2] = [
    "cert-manager.io/inject-ca-from",
    "cert-manager.io/inject-ca-from-secret",
];

/// How often [`serve_webhook_files`]'s caller should read the files again (the kubelet
/// updates a mounted Secret within about a minute of its change).
pub const CERT_RELOAD_PERIOD: Duration = Duration::from_secs(5);

/// Whether cert-manager injects the CA of the ValidatingWebhookConfiguration `validating` or
/// of the MutatingWebhookConfiguration `mutating`: one of them carries an annotation of
/// [`INJECT_CA_ANNOTATIONS`]. A configuration that does not exist counts as not annotated.
///
/// # Errors
/// [`Error::Kube`] if a configuration cannot be read.
pub async fn cert_manager_injects(
    client: &kube::Client,
    validating: &str,
    mutating: Option<&str>,
) -> Result<bool> {
    let annotated = |meta: &kube::core::ObjectMeta| {
        let list = meta.annotations.as_ref();
        INJECT_CA_ANNOTATIONS
            .iter()
            .any(|a| list.is_some_and(|l| l.contains_key(*a)))
    };
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let v = vapi
        .get_opt(validating)
        .await
        .map_err(kube_err(format!("reading {validating}")))?;
    if v.is_some_and(|v| annotated(&v.metadata)) {
        return Ok(true);
    }
    let Some(mutating) = mutating else {
        return Ok(false);
    };
    let mapi: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let m = mapi
        .get_opt(mutating)
        .await
        .map_err(kube_err(format!("reading {mutating}")))?;
    Ok(m.is_some_and(|m| annotated(&m.metadata)))
}

/// Waits until both files exist, checking every 500 ms for at most `limit` (Go's
/// `waitForCertsReady`, 30 s, in `cmd/kthena-controller-manager/main.go`).
///
/// # Errors
/// [`Error::CertFile`] (not found) for the first file still missing after `limit`.
pub async fn wait_for_files(cert: &Path, key: &Path, limit: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let missing = [cert, key].into_iter().find(|p| !p.exists());
        let Some(path) = missing else {
            return Ok(());
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::CertFile {
                path: path.to_owned(),
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A serving certificate from two PEM files, swapped in place by [`Self::reload`]: new
/// handshakes get the current one.
#[derive(Debug)]
pub(crate) struct FileCertificate {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    /// The PEM bytes last loaded and what was built from them.
    current: RwLock<(Vec<u8>, Arc<CertifiedKey>)>,
}

impl FileCertificate {
    /// Reads and checks the pair.
    ///
    /// # Errors
    /// [`Error::CertFile`], [`Error::Pem`] or [`Error::Tls`] (a key that does not match).
    pub(crate) fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self> {
        let (pem, certified) = read_pair(cert, key, &provider)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider,
            current: RwLock::new((pem, certified)),
        })
    }

    /// Reads the files again and serves them from the next handshake on when they changed;
    /// an unreadable or inconsistent pair (a half-written update) keeps the current one.
    /// Whether the served certificate changed.
    pub(crate) fn reload(&self) -> bool {
        let (pem, certified) = match read_pair(&self.cert, &self.key, &self.provider) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(error = %e, "Webhook certificate files not usable; serving the previous ones");
                return false;
            }
        };
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.0 == pem {
            return false;
        }
        *current = (pem, certified);
        tracing::info!(cert = %self.cert.display(), "Serving the renewed webhook certificate");
        true
    }
}

impl ResolvesServerCert for FileCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        Some(Arc::clone(&current.1))
    }
}

/// The concatenated PEM of both files and the key they make.
fn read_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<(Vec<u8>, Arc<CertifiedKey>)> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| Error::CertFile {
            path: path.to_owned(),
            source,
        })
    };
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Pem)?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(Error::Pem)?;
    let certified = CertifiedKey::from_der(chain, key_der, provider).map_err(Error::Tls)?;
    let mut pem = cert_pem;
    pem.extend_from_slice(&key_pem);
    Ok((pem, Arc::new(certified)))
}

#[cfg(test)]
mod tests;
