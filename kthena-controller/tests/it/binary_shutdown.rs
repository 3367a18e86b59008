//! The `kthena-controller` binary stops on SIGTERM even when the API server cannot be reached.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Regression: started while the API server was unreachable, the controller logged
/// `shutting down` on SIGTERM and went on running (and autoscaling) for minutes; only
/// SIGKILL ended it. It now exits within its 10 s shutdown grace.
#[tokio::test]
async fn sigterm_stops_the_controller_with_the_api_server_unreachable() -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    )?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena-controller"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--enable-webhook",
            "false",
            "--healthz-bind-address",
            "127.0.0.1:0",
            "--autoscaling-sync-period-seconds",
            "1",
        ])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // Running its loops against the missing API server: a failed list or round was logged.
    let failing = async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("failed") {
                return anyhow::Ok(());
            }
        }
        bail!("the controller ended before failing to reach the API server")
    };
    tokio::time::timeout(Duration::from_secs(30), failing)
        .await
        .context("no failure logged within 30 s")??;
    let pid = child.id().context("pid")?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    assert!(status.success());
    // Keep reading the log so the pipe never fills (the task ends with the test).
    let mut drain = tokio::task::JoinSet::new();
    drain.spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .context("still running 20 s after SIGTERM")??;
    assert!(exit.success(), "{exit:?}");
    Ok(())
}
