//! The `kthena-controller` binary started as Go Kthena's chart starts Go's
//! controller-manager: the args and environment of
//! `charts/workload/templates/kthena-controller-manager/component/deployment.yaml` with the
//! chart's default values, against the test API server. The chart gives no health-probe
//! address (Go's probes are the webhook's `/healthz` on 8443), so the tests add
//! `--healthz-bind-address=127.0.0.1:0` and, with the webhook on, `--port=0`, to share the
//! machine with other tests.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite};
use tokio::io::{AsyncWriteExt as _, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout};
use tokio_rustls::rustls;

const WAIT: Duration = Duration::from_secs(60);

/// `controllerManager.image.args` (`["--v=2"]`) then the webhook flags, as rendered with
/// the chart's default values and `controllerManager.webhook.enabled` = `webhook`.
fn chart_args(webhook: bool) -> Vec<String> {
    vec![
        "--v=2".into(),
        format!("--enable-webhook={webhook}"),
        "--cert-secret-name=kthena-controller-manager-webhook-certs".into(),
        "--service-name=kthena-controller-manager-webhook".into(),
    ]
}

/// Starts the binary with `args` and the chart's `POD_NAMESPACE`, on the test API server.
fn start(
    ns: &kthena_testenv::TestNamespace,
    args: &[String],
) -> Result<(Child, Lines<BufReader<ChildStdout>>)> {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena-controller"))
        .args(args)
        .arg("--healthz-bind-address=127.0.0.1:0")
        .env_clear()
        .env("KUBECONFIG", ns.env().kubeconfig())
        .env("POD_NAMESPACE", ns.name())
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    Ok((child, BufReader::new(stdout).lines()))
}

/// The `addr=` of the first log line holding `message`.
async fn logged_addr(lines: &mut Lines<BufReader<ChildStdout>>, message: &str) -> Result<String> {
    tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await? {
            if line.contains(message)
                && let Some((_, rest)) = line.split_once("addr=")
            {
                return Ok(rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned());
            }
        }
        bail!("the binary exited before logging {message:?}")
    })
    .await?
}

/// `GET /healthz` over `stream` as raw HTTP/1.1; the whole answer.
async fn healthz<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> Result<String> {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

#[tokio::test]
async fn go_chart_args_without_webhook_become_healthy() -> Result<()> {
    let ns = kthena_testenv::namespace("go-chart-ctl").await?;
    let (_child, mut lines) = start(&ns, &chart_args(false))?;
    let addr = logged_addr(&mut lines, "serving /healthz").await?;
    let reply = healthz(TcpStream::connect(&addr).await?).await?;
    assert!(
        reply.starts_with("HTTP/1.1 200 OK") && reply.ends_with("ok"),
        "{reply}"
    );
    Ok(())
}

/// With the chart's default `webhook.enabled: true`: the certificate goes to the Secret
/// `--cert-secret-name` in `POD_NAMESPACE`, and the webhook port answers the chart's HTTPS
/// probe (`/healthz`) with that certificate, for the `--service-name` Service's DNS names.
#[tokio::test]
async fn go_chart_args_with_webhook_answer_the_https_probe() -> Result<()> {
    let ns = kthena_testenv::namespace("go-chart-ctl-wh").await?;
    let mut args = chart_args(true);
    args.push("--port=0".into());
    let (_child, mut lines) = start(&ns, &args)?;
    let addr = logged_addr(&mut lines, "serving admission webhooks").await?;
    let secret = ns
        .api::<Secret>()
        .get("kthena-controller-manager-webhook-certs")
        .await?;
    let data = secret.data.context("no data")?;
    let ca = &data.get("ca.crt").context("no ca.crt")?.0;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let host = format!("kthena-controller-manager-webhook.{}.svc", ns.name());
    let name = rustls::pki_types::ServerName::try_from(host)?;
    let tcp = TcpStream::connect(&addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await?;
    let reply = healthz(tls).await?;
    assert!(
        reply.starts_with("HTTP/1.1 200 OK") && reply.ends_with("ok"),
        "{reply}"
    );
    Ok(())
}
