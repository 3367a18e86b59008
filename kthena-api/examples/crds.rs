//! Prints the CustomResourceDefinitions of all six kinds as one multi-document YAML stream,
//! or, given a directory, writes one file per CRD there (the files of the Helm chart's
//! `charts/kthena/crds/`, which `scripts/deploy-manifests.sh` copies to `deploy/crds/`); given
//! a second directory, writes the Inference Extension's `InferencePool` CRD there (the file
//! of `deploy/gateway-api/`).
//!
//! ```text
//! cargo run -p kthena-api --example crds > crds.yaml && kubectl apply -f crds.yaml
//! cargo run -p kthena-api --example crds -- charts/kthena/crds deploy/gateway-api
//! ```

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let files = kthena_api::crd_files()?;
    if let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(dir) = std::env::args_os().nth(2).map(PathBuf::from) {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let (name, text) = kthena_api::thirdparty::inference_pool_crd_file()?;
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for (_, text) in files {
        writeln!(out, "---")?;
        out.write_all(text.as_bytes())?;
    }
    Ok(())
}
