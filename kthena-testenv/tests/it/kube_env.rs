//! `scripts/kube-env.sh crds DIR`: installs Kthena's CRDs, the Gateway API CRDs and the
//! Inference Extension's InferencePool CRD (shipped in `deploy/gateway-api/`, with the
//! `api-approved.kubernetes.io` annotation its group needs) into a control plane, so Go
//! Kthena's InferencePool example applies.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

#[tokio::test]
async fn kube_env_crds_installs_the_inference_pool_crd() -> Result<()> {
    let ns = kthena_testenv::namespace("kube-env-crds").await?;
    let dir = ns
        .env()
        .plane()
        .dir()
        .context("this test needs the control plane kube-env.sh started")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kube-env.sh");
    let out = std::process::Command::new(&script)
        .arg("crds")
        .arg(dir)
        .output()?;
    if !out.status.success() {
        bail!("kube-env.sh crds: {}", String::from_utf8_lossy(&out.stderr));
    }
    let crd = ns
        .kubectl()
        .args(["get", "crd", "inferencepools.inference.networking.k8s.io"])
        .args([
            "-o",
            "jsonpath={.metadata.annotations.api-approved\\.kubernetes\\.io}",
        ])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&crd.stdout),
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension"
    );
    let pool = serde_json::json!({
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "deepseek-r1-1-5b"},
        "spec": {"targetPorts": [{"number": 8000}],
                 "selector": {"matchLabels": {"app": "deepseek-r1-1-5b"}},
                 "endpointPickerRef": {"name": "kthena-router", "port": {"number": 8080}}},
    });
    let tmp = tempfile::NamedTempFile::new()?;
    std::fs::write(tmp.path(), serde_json::to_vec(&pool)?)?;
    let applied = ns
        .kubectl()
        .arg("apply")
        .arg("-f")
        .arg(tmp.path())
        .output()?;
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    Ok(())
}
