//! Prints the CustomResourceDefinitions of all six kinds as one multi-document YAML stream.
//!
//! ```text
//! cargo run -p kthena-api --example crds > crds.yaml && kubectl apply -f crds.yaml
//! ```

use std::io::Write as _;

fn main() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for crd in kthena_api::crds() {
        writeln!(out, "---")?;
        out.write_all(serde_saphyr::to_string(&crd)?.as_bytes())?;
    }
    Ok(())
}
