//! Prints the CustomResourceDefinitions of all six kinds as one multi-document YAML stream,
//! or, given a directory, writes one file per CRD there (the files of `deploy/crds/`).
//!
//! ```text
//! cargo run -p kthena-api --example crds > crds.yaml && kubectl apply -f crds.yaml
//! cargo run -p kthena-api --example crds -- deploy/crds
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
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for (_, text) in files {
        writeln!(out, "---")?;
        out.write_all(text.as_bytes())?;
    }
    Ok(())
}
