//! cert-manager mode of the `kthena-controller` binary: when its webhook configurations
//! carry `cert-manager.io/inject-ca-from` (Go's chart with `certManagementMode:
//! cert-manager`), it serves the mounted `tls.crt`/`tls.key`, picks up a renewed pair without
//! a restart, and neither generates a certificate nor writes a `caBundle`. On a control
//! plane of its own: the webhook configurations are cluster-scoped, with Go's names.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kthena_controller::webhook::{
    CERT_RELOAD_PERIOD, CERT_SECRET_NAME, Certificate, MUTATING_WEBHOOK, VALIDATING_WEBHOOK,
    generate_certificate,
};
use kube::Api;
use kube::api::{ListParams, PostParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;

/// The two webhook configurations as the chart renders them in cert-manager mode (the
/// annotation, no `caBundle`), with one webhook each that admits nothing of this test.
async fn register(client: &kube::Client) -> Result<()> {
    let hook = |name: &str| {
        json!({
            "name": name,
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": ["kthena.test"], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["nothing"]}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    };
    let meta = |name: &str| {
        json!({"name": name, "annotations": {
            "cert-manager.io/inject-ca-from": "kthena-system/kthena-controller-manager-webhook-cert"
        }})
    };
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": meta(VALIDATING_WEBHOOK),
        "webhooks": [hook("validate.kthena.test")],
    }))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &v)
        .await?;
    let m: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": meta(MUTATING_WEBHOOK),
        "webhooks": [hook("mutate.kthena.test")],
    }))?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &m)
        .await?;
    Ok(())
}

/// Whether any webhook of the two configurations has a `caBundle`.
async fn ca_bundle_written(client: &kube::Client) -> Result<bool> {
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(VALIDATING_WEBHOOK)
        .await?;
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(MUTATING_WEBHOOK)
        .await?;
    let v = v
        .webhooks
        .iter()
        .flatten()
        .any(|h| h.client_config.ca_bundle.is_some());
    let m = m
        .webhooks
        .iter()
        .flatten()
        .any(|h| h.client_config.ca_bundle.is_some());
    Ok(v || m)
}

/// Writes the pair as the kubelet updates a mounted Secret: whole files, then renamed.
fn write_pair(dir: &Path, cert: &Certificate) -> Result<()> {
    for (name, pem) in [("tls.crt", &cert.cert_pem), ("tls.key", &cert.key_pem)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, pem)?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}

/// The DER of the first certificate of `pem`.
fn der(pem: &str) -> Result<Vec<u8>> {
    let first = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .context("no certificate")??;
    Ok(first.to_vec())
}

/// The leaf certificate `addr` serves (a TLS client trusting the CAs of `trusted`).
async fn served(addr: &str, trusted: &[&Certificate]) -> Result<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in trusted {
        for cert in CertificateDer::pem_slice_iter(c.ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1")?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let (_, conn) = tls.get_ref();
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .context("no peer cert")?;
    Ok(leaf.to_vec())
}

#[tokio::test]
async fn cert_manager_mode_serves_and_reloads_the_mounted_files_and_writes_no_ca_bundle()
-> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    let client = plane.client().await?;
    register(&client).await?;
    let dir = tempfile::tempdir()?;
    let hosts = ["127.0.0.1".to_owned()];
    let first = generate_certificate(&hosts)?;
    write_pair(dir.path(), &first)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena-controller"));
    cmd.arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .arg("--controllers=-modelserving,-modelbooster,-autoscaler")
        .args([
            "--webhook-bind-address",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args(["--health-probe-bind-address", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-private-key-file")
        .arg(dir.path().join("tls.key"))
        .env("POD_NAMESPACE", "default");
    let (mut child, mut lines, line) =
        crate::proc_support::spawn_until_logged(&mut cmd, "serving admission webhooks").await?;
    assert!(line.contains("cert-manager injects the caBundle"), "{line}");
    // Keep reading the log so the child never blocks on a full pipe.
    let mut drain = tokio::task::JoinSet::new();
    drain.spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let addr = format!("127.0.0.1:{port}");
    assert_eq!(served(&addr, &[&first]).await?, der(&first.cert_pem)?);
    // cert-manager renews: the new pair is served within the reload period, no restart.
    let renewed = generate_certificate(&hosts)?;
    write_pair(dir.path(), &renewed)?;
    let written = tokio::time::Instant::now();
    let deadline = written + CERT_RELOAD_PERIOD + Duration::from_secs(3);
    loop {
        if served(&addr, &[&first, &renewed]).await? == der(&renewed.cert_pem)? {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the renewed certificate was not served within the reload period");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("renewed certificate served after {:?}", written.elapsed());
    assert!(
        child.try_wait()?.is_none(),
        "the binary restarted or exited"
    );
    // Neither a caBundle write nor a generated certificate Secret.
    assert!(!ca_bundle_written(&client).await?, "caBundle written");
    let secrets = Api::<Secret>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    assert!(
        !secrets
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(CERT_SECRET_NAME)),
        "a certificate Secret was created"
    );
    Ok(())
}
