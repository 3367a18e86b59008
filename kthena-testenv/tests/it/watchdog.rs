//! The watchdog stops the control plane when the process that started it dies, even by
//! SIGKILL (no destructor, no exit handler runs).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result};

fn alive(pid: &str) -> bool {
    Path::new("/proc").join(pid).exists()
}

#[test]
fn sigkill_of_the_owner_stops_the_control_plane() -> Result<()> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kthena-testenv"))
        .env_remove(kthena_testenv::REUSE_ENV)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut dir = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(d) = line.strip_prefix("KTHENA_TESTENV_DIR=") {
            dir = Some(PathBuf::from(d));
        }
        if line.starts_with("export KUBECONFIG=") {
            break;
        }
    }
    let dir = dir.context("the binary printed its directory")?;
    let apiserver = std::fs::read_to_string(dir.join("apiserver.pid"))?
        .trim()
        .to_owned();
    let etcd = std::fs::read_to_string(dir.join("etcd.pid"))?
        .trim()
        .to_owned();
    assert!(alive(&apiserver) && alive(&etcd), "the control plane runs");

    child.kill()?; // SIGKILL
    child.wait()?;
    // The watchdog polls every 200 ms; `down` waits up to 10 s per process before SIGKILL.
    let mut waited = Duration::ZERO;
    while (dir.exists() || alive(&apiserver) || alive(&etcd)) && waited < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(100));
        waited += Duration::from_millis(100);
    }
    assert!(!alive(&apiserver), "kube-apiserver {apiserver} stopped");
    assert!(!alive(&etcd), "etcd {etcd} stopped");
    assert!(!dir.exists(), "{} removed", dir.display());
    Ok(())
}
