//! What a kubelet would do with the installed Deployments, for the chart tests: read a
//! Deployment back from the API server, resolve its container's env (`value`, and `valueFrom`
//! of ConfigMaps, Secrets and the downward API), authenticate as its ServiceAccount (a
//! TokenRequest token), and run our binary with exactly its args and that env.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, Secret, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use tokio::process::{Child, Command};

/// The pod IP the downward API gives (`status.podIP`): processes run on loopback.
const POD_IP: &str = "127.0.0.1";

/// The router binary: built next to this crate's binary (`cargo build -p kthena-router`, or
/// any `cargo test --workspace` run, builds it there); built here when missing.
pub(crate) fn router_bin() -> Result<PathBuf> {
    let bin = Path::new(env!("CARGO_BIN_EXE_kthena-controller")).with_file_name("kthena-router");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = std::process::Command::new(cargo)
            .args([
                "build",
                "-p",
                "kthena-router",
                "--all-features",
                "--bin",
                "kthena-router",
            ])
            .status()?;
        if !status.success() || !bin.exists() {
            bail!("no {} (cargo build -p kthena-router failed)", bin.display());
        }
    }
    Ok(bin)
}

/// The Deployment `name` of `ns` and its first container, as installed.
pub(crate) async fn deployment(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(Deployment, Container)> {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let c = d
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .cloned()
        .context("no container")?;
    Ok((d, c))
}

/// The container's environment as a kubelet resolves it for a pod of namespace `ns` named
/// `pod`: literal values, ConfigMap and Secret keys (skipped when missing and `optional`),
/// and `fieldRef`s.
pub(crate) async fn resolve_env(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    sa: &str,
    c: &Container,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for var in c.env.iter().flatten() {
        if let Some(value) = resolve_var(client, ns, pod, sa, var).await? {
            out.push((var.name.clone(), value));
        }
    }
    Ok(out)
}

async fn resolve_var(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    sa: &str,
    var: &EnvVar,
) -> Result<Option<String>> {
    let Some(from) = &var.value_from else {
        return Ok(Some(var.value.clone().unwrap_or_default()));
    };
    if let Some(f) = &from.field_ref {
        return Ok(Some(match f.field_path.as_str() {
            "metadata.namespace" => ns.to_owned(),
            "metadata.name" => pod.to_owned(),
            "spec.serviceAccountName" => sa.to_owned(),
            "status.podIP" | "status.hostIP" => POD_IP.to_owned(),
            other => bail!("fieldRef {other} is not resolved by this test"),
        }));
    }
    if let Some(r) = &from.config_map_key_ref {
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(&r.name)
            .await?;
        let value = cm.and_then(|cm| cm.data?.get(&r.key).cloned());
        return optional(value, r.optional, &var.name);
    }
    if let Some(r) = &from.secret_key_ref {
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(&r.name)
            .await?;
        let value = secret
            .and_then(|s| s.data?.get(&r.key).cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        return optional(value, r.optional, &var.name);
    }
    bail!("{}: unsupported valueFrom", var.name)
}

fn optional(value: Option<String>, optional: Option<bool>, name: &str) -> Result<Option<String>> {
    match value {
        Some(v) => Ok(Some(v)),
        None if optional == Some(true) => Ok(None),
        None => bail!("{name}: the referenced key does not exist"),
    }
}

/// A kubeconfig at `path` for ServiceAccount `ns/sa` (a one-hour TokenRequest token) on the
/// cluster of `kubeconfig`, with `ns` as its namespace (as a pod's service-account files).
pub(crate) async fn service_account_kubeconfig(
    client: &kube::Client,
    kubeconfig: &Path,
    ns: &str,
    sa: &str,
    path: &Path,
) -> Result<()> {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await?
        .status
        .context("no token status")?
        .token
        .context("no token")?;
    let mut kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    for named in &mut kc.auth_infos {
        named.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..kube::config::AuthInfo::default()
        });
    }
    for named in &mut kc.contexts {
        if let Some(ctx) = named.context.as_mut() {
            ctx.namespace = Some(ns.to_owned());
        }
    }
    std::fs::write(path, serde_json::to_string(&kc)?)?;
    Ok(())
}

/// A running binary, killed when dropped; its stdout and stderr go to `log`.
pub(crate) struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `bin` with exactly `args` and `env` (nothing inherited).
    pub(crate) fn spawn(
        bin: &Path,
        args: &[String],
        env: &[(String, String)],
        log: PathBuf,
    ) -> Result<Self> {
        let file = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self { child, log })
    }

    /// An error if the process has exited, with the end of its log.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("exited with {status}:\n{}", self.log_tail());
        }
        Ok(())
    }

    /// The last 40 lines of the log.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// Waits until `probe` returns true, failing early if `proc` exits; at most `limit`.
pub(crate) async fn wait_until<F, Fut>(
    proc: &mut Proc,
    limit: Duration,
    what: &str,
    probe: F,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if probe().await {
            return Ok(());
        }
        proc.check_alive().with_context(|| what.to_owned())?;
        if tokio::time::Instant::now() > deadline {
            bail!("{what}: not after {limit:?}; log:\n{}", proc.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One HTTP/1.1 request on 127.0.0.1:`port` (plain): `(status, body)`.
pub(crate) async fn http(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    parse_response(&raw)
}

/// `GET path` over TLS on 127.0.0.1:`port`, trusting only `ca_pem`, as `localhost`: the status.
pub(crate) async fn https_get(port: u16, ca_pem: &str, path: &str) -> Result<u16> {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(der?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    let head = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    tls.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    // A TLS peer may close without close_notify; what was read is enough for the status.
    let _ = tls.read_to_end(&mut raw).await;
    Ok(parse_response(&raw)?.0)
}

fn parse_response(raw: &[u8]) -> Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP response: {text}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// A simulated node on `plane` that runs the pods of our images as the binaries of
/// `bin_dir` (logs under `pods_dir`) and every other pod as a kthena-sim engine.
pub(crate) async fn process_node(
    plane: &kthena_testenv::ControlPlane,
    bin_dir: PathBuf,
    pods_dir: &Path,
) -> Result<kthena_sim::node::SimNode> {
    use kthena_sim::node::{ApiServer, NodeConfig, ProcessConfig, SimNode};
    let kc = kube::config::Kubeconfig::read_from(plane.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(SimNode::start(
        plane.client().await?,
        NodeConfig {
            health_interval: Duration::from_millis(100),
            processes: Some(ProcessConfig {
                bin_dir,
                pods_dir: pods_dir.to_owned(),
                api_server: ApiServer::from_kube_config(&config),
            }),
            ..NodeConfig::default()
        },
    ))
}
