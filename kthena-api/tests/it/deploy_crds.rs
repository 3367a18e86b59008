//! The CRDs committed under the Helm chart's `charts/kthena/crds/` and `deploy/gateway-api/` are
//! the ones generated from the Rust types. Regenerate them with
//! `cargo run -p kthena-api --example crds -- charts/kthena/crds deploy/gateway-api` (then
//! `scripts/deploy-manifests.sh` copies the chart's CRDs to `deploy/crds/`).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context as _, Result};

#[test]
fn committed_crds_equal_generated() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/kthena/crds");
    let files = kthena_api::crd_files()?;
    for (name, text) in &files {
        let committed = std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("charts/kthena/crds/{name} is missing; regenerate it"))?;
        assert!(
            committed == *text,
            "charts/kthena/crds/{name} differs from the generated CRD; regenerate with \
             `cargo run -p kthena-api --example crds -- charts/kthena/crds`"
        );
    }
    let expected: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
    assert_eq!(
        present, expected,
        "charts/kthena/crds/ holds exactly the generated CRDs"
    );
    Ok(())
}

/// The InferencePool CRD that Gateway API mode with the Inference Extension needs is shipped,
/// with the `api-approved.kubernetes.io` annotation the API server requires of its group.
#[test]
fn committed_inference_pool_crd_equals_generated() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/gateway-api");
    let (name, text) = kthena_api::thirdparty::inference_pool_crd_file()?;
    assert_eq!(name, "inference.networking.k8s.io_inferencepools.yaml");
    let committed = std::fs::read_to_string(dir.join(&name))
        .with_context(|| format!("deploy/gateway-api/{name} is missing; regenerate it"))?;
    assert!(
        committed == text,
        "deploy/gateway-api/{name} differs from the generated CRD; regenerate with \
         `cargo run -p kthena-api --example crds -- charts/kthena/crds deploy/gateway-api`"
    );
    assert!(text.contains("api-approved.kubernetes.io: https://github.com/kubernetes-sigs/gateway-api-inference-extension"));
    Ok(())
}
