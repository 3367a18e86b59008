//! The pod's service-account credentials, as a kubelet projects them, for processes that
//! read a kubeconfig: a token from the TokenRequest API, bound to the pod (it stops working
//! when the pod is deleted) and renewed at 80 % of its life, written to `<pod dir>/token`,
//! and `<pod dir>/kubeconfig` naming the API server, its CA (`<pod dir>/ca.crt`) and the
//! token file (`tokenFile`, which kube-rs and client-go re-read every minute).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt as _};
use tokio::time::Instant;

use super::io_message;

/// Lifetime asked for each token (a kubelet asks 3607 s).
const TOKEN_SECONDS: i64 = 3600;

/// The API server as the pods see it: URL, CA, verification.
#[derive(Debug, Clone)]
pub struct ApiServer {
    /// `https://host:port`.
    pub url: String,
    /// The CA certificates, PEM; `None` for the system roots.
    pub ca_pem: Option<String>,
    /// Skip verifying the server certificate.
    pub insecure: bool,
}

impl ApiServer {
    /// The API server of a kube-rs client configuration (its URL, root certificates and
    /// `accept_invalid_certs`).
    #[must_use]
    pub fn from_kube_config(config: &kube::Config) -> Self {
        let ca_pem = config
            .root_cert
            .as_ref()
            .map(|certs| certs.iter().map(|der| pem(der)).collect::<String>());
        Self {
            url: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_owned(),
            ca_pem,
            insecure: config.accept_invalid_certs,
        }
    }

    /// Host and port of the URL (443 when it has none).
    pub(super) fn host_port(&self) -> Option<(String, String)> {
        let uri: http::Uri = self.url.parse().ok()?;
        let host = uri
            .host()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        Some((host, uri.port_u16().unwrap_or(443).to_string()))
    }
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// A pod's token file and kubeconfig.
#[derive(Debug)]
pub(super) struct Token {
    dir: PathBuf,
    renew_at: Instant,
}

impl Token {
    /// Requests a token for the pod's service account (`spec.serviceAccountName`, else
    /// `default`) and writes the token, CA and kubeconfig; `None` when the pod sets
    /// `automountServiceAccountToken: false`.
    ///
    /// # Errors
    /// A message when the service account does not exist or the request fails.
    pub(super) async fn issue(
        client: &Client,
        pod: &Pod,
        dir: &Path,
        api: &ApiServer,
    ) -> Result<Option<Self>, String> {
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.automount_service_account_token) == Some(false) {
            return Ok(None);
        }
        write_token(client, pod, dir).await?;
        let namespace = pod.namespace().unwrap_or_default();
        write_kubeconfig(dir, api, &namespace)?;
        Ok(Some(Self {
            dir: dir.to_owned(),
            renew_at: renew_at(),
        }))
    }

    /// Path of the kubeconfig.
    pub(super) fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Writes a new token when 80 % of the last one's life has passed.
    pub(super) async fn renew_if_due(&mut self, client: &Client, pod: &Pod) {
        if Instant::now() < self.renew_at {
            return;
        }
        match write_token(client, pod, &self.dir).await {
            Ok(()) => self.renew_at = renew_at(),
            Err(e) => {
                tracing::warn!(pod = %pod.name_any(), error = %e, "Renewing the service-account token failed.")
            }
        }
    }
}

fn renew_at() -> Instant {
    let life = Duration::from_secs(u64::try_from(TOKEN_SECONDS).unwrap_or(3600));
    Instant::now() + life.mul_f64(0.8)
}

fn service_account(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.service_account_name.clone())
        .or_else(|| spec.and_then(|s| s.service_account.clone()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

async fn write_token(client: &Client, pod: &Pod, dir: &Path) -> Result<(), String> {
    let namespace = pod.namespace().unwrap_or_default();
    let sa = service_account(pod);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(pod.name_any()),
                uid: pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    let got = api
        .create_token_request(&sa, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("token of ServiceAccount {namespace}/{sa}: {e}"))?;
    let token = got
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| format!("token of ServiceAccount {namespace}/{sa}: no status"))?;
    write_private(&dir.join("token"), token.as_bytes())
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| io_message("writing", &tmp, &e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io_message("setting the mode of", &tmp, &e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_message("writing", path, &e))
}

/// The kubeconfig (JSON, which is YAML) of the pod: cluster, `tokenFile`, the pod's
/// namespace as the context's.
fn write_kubeconfig(dir: &Path, api: &ApiServer, namespace: &str) -> Result<(), String> {
    let mut cluster = serde_json::json!({ "server": api.url });
    if let Some(pem) = &api.ca_pem {
        let ca = dir.join("ca.crt");
        std::fs::write(&ca, pem).map_err(|e| io_message("writing", &ca, &e))?;
        cluster["certificate-authority"] = ca.display().to_string().into();
    }
    if api.insecure {
        cluster["insecure-skip-tls-verify"] = true.into();
    }
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "cluster", "cluster": cluster }],
        "users": [{ "name": "pod", "user": { "tokenFile": dir.join("token").display().to_string() } }],
        "contexts": [{ "name": "pod", "context": { "cluster": "cluster", "user": "pod", "namespace": namespace } }],
        "current-context": "pod",
    });
    let text = serde_json::to_vec_pretty(&config).map_err(|e| e.to_string())?;
    write_private(&dir.join("kubeconfig"), &text)
}
