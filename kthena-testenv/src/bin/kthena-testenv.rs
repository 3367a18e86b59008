//! `kthena-testenv`: starts the test control plane with every CRD installed (as the tests get
//! it), prints how to reach it, and keeps it until Ctrl-C (or until this process dies: the
//! watchdog stops it either way).
//!
//! ```text
//! $ cargo run -p kthena-testenv
//! KTHENA_TESTENV_DIR=/tmp/kthena-testenv-AbC123
//! export KUBECONFIG=/tmp/kthena-testenv-AbC123/kubeconfig
//! export KUBECTL=/var/cache/kthena/k8s/kubectl
//! ```

use std::io::Write as _;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let env = kthena_testenv::TestEnv::get().await?;
        let mut out = std::io::stdout().lock();
        if let Some(dir) = env.dir() {
            writeln!(out, "KTHENA_TESTENV_DIR={}", dir.display())?;
        }
        writeln!(out, "export KUBECONFIG={}", env.kubeconfig().display())?;
        writeln!(out, "export KUBECTL={}", env.kubectl_path().display())?;
        writeln!(
            out,
            "# ready in {} ms; Ctrl-C stops it",
            env.startup().as_millis()
        )?;
        out.flush()?;
        drop(out);
        tokio::signal::ctrl_c().await?;
        anyhow::Ok(())
    })
}
