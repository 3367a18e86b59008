//! The `kthena-router` binary started as Go Kthena's chart starts Go's router: the args and
//! environment of `charts/networking/templates/kthena-router/component/deployment.yaml`
//! with the chart's default values, no `--config`, against the test API server.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::common::free_port;

/// Longest wait for the router to become ready.
const READY: Duration = Duration::from_secs(60);

/// The args the chart renders with its default values (`exposeOnRouterPort` aside), on
/// free ports (the chart's are 8080, 9090 and 15000).
fn chart_args(port: u16, metrics: u16, debug: u16, expose: bool) -> Vec<String> {
    vec![
        format!("--port={port}"),
        format!("--metrics-port={metrics}"),
        format!("--expose-metrics-on-router-port={expose}"),
        format!("--debug-port={debug}"),
        "--enable-webhook=true".into(),
        "--enable-gateway-api=false".into(),
        "--webhook-port=8443".into(),
        "--webhook-tls-cert-file=/etc/tls/tls.crt".into(),
        "--webhook-tls-private-key-file=/etc/tls/tls.key".into(),
        "--cert-secret-name=kthena-router-webhook-certs".into(),
        "--webhook-service-name=kthena-router-webhook".into(),
    ]
}

/// A router process with its logs in files; killed on drop.
struct Proc {
    child: Child,
    port: u16,
    metrics: u16,
    dir: tempfile::TempDir,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts the binary with the chart's args (ports replaced) plus `extra`, and the
    /// chart's environment (`POD_NAMESPACE`, `ACCESS_LOG_*`, `DRAIN_TIMEOUT`; `REDIS_*` are
    /// optional references to a ConfigMap and Secret that do not exist).
    async fn start(extra: &[String], expose: bool) -> Self {
        let ns = kthena_testenv::namespace("go-chart").await.unwrap();
        let (port, metrics) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kthena-router"));
        cmd.args(chart_args(port, metrics, free_port(), expose))
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KUBECONFIG", ns.env().kubeconfig())
            .env("POD_NAMESPACE", ns.name())
            .env("ACCESS_LOG_ENABLED", "true")
            .env("ACCESS_LOG_FORMAT", "text")
            .env("ACCESS_LOG_OUTPUT", "stdout")
            .env("DRAIN_TIMEOUT", "5m")
            .env("NO_COLOR", "1")
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
        Self {
            child: cmd.spawn().unwrap(),
            port,
            metrics,
            dir,
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Polls `GET /readyz` (through `get`) until 200, failing with the logs after [`READY`].
    async fn ready<F, Fut>(&mut self, get: F)
    where
        F: Fn(u16) -> Fut,
        Fut: Future<Output = std::io::Result<String>>,
    {
        let deadline = tokio::time::Instant::now() + READY;
        loop {
            if let Ok(reply) = get(self.port).await
                && reply.starts_with("HTTP/1.1 200")
            {
                return;
            }
            let exited = self.child.try_wait().unwrap();
            assert!(
                exited.is_none() && tokio::time::Instant::now() < deadline,
                "not ready ({exited:?}): {}",
                self.log("stderr")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `GET path` over `stream` as raw HTTP/1.1; the whole answer.
async fn raw_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    path: &str,
) -> std::io::Result<String> {
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply))
        .await
        .map_err(|_| std::io::Error::other("no answer within 10 s"))??;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

async fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    raw_get(TcpStream::connect(("127.0.0.1", port)).await?, path).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_chart_args_and_env_without_config_become_ready() {
    let mut r = Proc::start(&[], false).await;
    r.ready(|port| http_get(port, "/readyz")).await;
    let healthz = http_get(r.port, "/healthz").await.unwrap();
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    assert!(healthz.ends_with(r#"{"message":"ok"}"#), "{healthz}");
    // exposeOnRouterPort is false: /metrics only on the metrics port.
    let on_router = http_get(r.port, "/metrics").await.unwrap();
    assert!(on_router.starts_with("HTTP/1.1 404"), "{on_router}");
    let metrics = http_get(r.metrics, "/metrics").await.unwrap();
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("kthena_router_"), "{metrics}");
    let stderr = r.log("stderr");
    assert!(
        stderr.contains(
            "No configuration file (--config, /etc/config/routerConfiguration.yaml): \
             cluster mode with the built-in defaults"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "WARN kthena_router: --enable-webhook: the router serves no admission webhook (port 8443)"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expose_metrics_on_router_port_serves_metrics_on_the_inference_port() {
    let mut r = Proc::start(&[], true).await;
    r.ready(|port| http_get(port, "/readyz")).await;
    let metrics = http_get(r.port, "/metrics").await.unwrap();
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics
            .contains("content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{metrics}"
    );
    assert!(metrics.contains("kthena_router_"), "{metrics}");
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
}

/// A self-signed certificate for 127.0.0.1 written as `tls.crt` and `tls.key` in `dir`.
fn certificate(dir: &Path) -> (PathBuf, PathBuf, rustls::pki_types::CertificateDer<'static>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (crt, pem_key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem_key, key.serialize_pem()).unwrap();
    (crt, pem_key, cert.der().clone())
}

/// `GET path` over TLS, trusting only `ca`.
async fn https_get(
    port: u16,
    path: &str,
    ca: rustls::pki_types::CertificateDer<'static>,
) -> std::io::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).map_err(std::io::Error::other)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name =
        rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(std::io::Error::other)?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await?;
    raw_get(tls, path).await
}

/// `--tls-cert`/`--tls-key` (Go's chart in cert-manager mode with `kthenaRouter.tls`): the
/// probes' `/healthz` and `/readyz` answer over HTTPS; plain HTTP gets no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cert_and_key_serve_https_and_not_plain_http() {
    let certs = tempfile::tempdir().unwrap();
    let (crt, key, ca) = certificate(certs.path());
    let args = [
        format!("--tls-cert={}", crt.display()),
        format!("--tls-key={}", key.display()),
    ];
    let mut r = Proc::start(&args, false).await;
    let trusted = ca.clone();
    r.ready(move |port| https_get(port, "/readyz", trusted.clone()))
        .await;
    let healthz = https_get(r.port, "/healthz", ca).await.unwrap();
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    let plain = http_get(r.port, "/healthz").await;
    assert!(
        !plain.as_ref().is_ok_and(|reply| reply.starts_with("HTTP/")),
        "plain HTTP was answered: {plain:?}"
    );
    let stderr = r.log("stderr");
    assert!(stderr.contains("https=true"), "{stderr}");
}

/// A file given by `--config` wins over the chart's environment for the keys it sets
/// (`accessLog.format: json` over `ACCESS_LOG_FORMAT=text`), and the environment still sets
/// the others (`ACCESS_LOG_OUTPUT=stdout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_wins_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("router.yaml");
    std::fs::write(&file, "accessLog:\n  format: json\n").unwrap();
    let mut r = Proc::start(&[format!("--config={}", file.display())], false).await;
    r.ready(|port| http_get(port, "/readyz")).await;
    let body = r#"{"model":"nothing","messages":[{"role":"user","content":"hi"}]}"#;
    let mut conn = TcpStream::connect(("127.0.0.1", r.port)).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 404"), "{reply}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        let stdout = r.log("stdout");
        if let Some(line) = stdout.lines().find(|l| l.contains("/v1/chat/completions")) {
            break line.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no access log line: {stdout}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["path"], "/v1/chat/completions", "{line}");
    assert_eq!(entry["status_code"], 404, "{line}");
    let stderr = r.log("stderr");
    assert!(
        stderr.contains(&format!("Configuration file path={}", file.display())),
        "{stderr}"
    );
}
