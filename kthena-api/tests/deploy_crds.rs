//! The CRDs committed under `deploy/crds/` are the ones generated from the Rust types.
//! Regenerate them with `cargo run -p kthena-api --example crds -- deploy/crds`.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context as _, Result};

#[test]
fn committed_crds_equal_generated() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let files = kthena_api::crd_files()?;
    for (name, text) in &files {
        let committed = std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("deploy/crds/{name} is missing; regenerate it"))?;
        assert!(
            committed == *text,
            "deploy/crds/{name} differs from the generated CRD; regenerate with \
             `cargo run -p kthena-api --example crds -- deploy/crds`"
        );
    }
    let expected: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    let present: BTreeSet<&str> = present.iter().map(String::as_str).collect();
    assert_eq!(
        present, expected,
        "deploy/crds/ holds exactly the generated CRDs"
    );
    Ok(())
}
