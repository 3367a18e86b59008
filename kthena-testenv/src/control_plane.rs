//! Starting (or reusing) the control plane: `scripts/kube-env.sh up DIR`, a watchdog that
//! runs `down DIR` when the test process is gone, and reading `DIR/env`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result, io_err};

/// Environment variable naming the kubeconfig of a running cluster to reuse instead of
/// starting a control plane (nothing is started or stopped then).
pub const REUSE_ENV: &str = "KTHENA_TEST_KUBECONFIG";

/// Environment variable overriding the build cache of `scripts/kube-env.sh`.
pub const CACHE_ENV: &str = "KTHENA_K8S_CACHE";

/// Default build cache of `scripts/kube-env.sh`.
pub const DEFAULT_CACHE: &str = "/var/cache/kthena/k8s";

/// Where the control plane lives and how to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub(crate) kubeconfig: PathBuf,
    pub(crate) kubectl: PathBuf,
    /// `Some` when this process started it (then `DIR/env` exists there).
    pub(crate) dir: Option<PathBuf>,
    pub(crate) apiserver_pid: Option<u32>,
    pub(crate) etcd_pid: Option<u32>,
}

/// The build cache directory (`$KTHENA_K8S_CACHE` or `/var/cache/kthena/k8s`).
pub(crate) fn cache_dir() -> PathBuf {
    std::env::var_os(CACHE_ENV).map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from)
}

/// `scripts/kube-env.sh` of this workspace.
pub(crate) fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kube-env.sh")
}

/// Reuses `$KTHENA_TEST_KUBECONFIG` or starts a new control plane.
pub(crate) fn locate() -> Result<Location> {
    if let Some(kubeconfig) = std::env::var_os(REUSE_ENV) {
        let kubectl = std::env::var_os("KUBECTL")
            .map_or_else(|| cache_dir().join("kubectl"), PathBuf::from);
        return Ok(Location {
            kubeconfig: PathBuf::from(kubeconfig),
            kubectl,
            dir: None,
            apiserver_pid: None,
            etcd_pid: None,
        });
    }
    start()
}

/// Runs `kube-env.sh up` in a fresh directory and arms the watchdog.
fn start() -> Result<Location> {
    let dir = tempfile::Builder::new()
        .prefix("kthena-testenv-")
        .tempdir()
        .map_err(io_err("creating the control-plane directory"))?
        .keep();
    // The watchdog first, so that a failing `up` is cleaned up too.
    spawn_watchdog(&dir)?;
    let script = script();
    run(Command::new("bash").arg(&script).arg("up").arg(&dir))?;
    let env = EnvFile::read(&dir.join("env"))?;
    Ok(Location {
        kubeconfig: env.get("KUBECONFIG").map_or_else(|| dir.join("kubeconfig"), PathBuf::from),
        kubectl: env.require("KUBECTL").map(PathBuf::from)?,
        apiserver_pid: env.get("KTHENA_APISERVER_PID").and_then(|p| p.parse().ok()),
        etcd_pid: env.get("KTHENA_ETCD_PID").and_then(|p| p.parse().ok()),
        dir: Some(dir),
    })
}

/// A detached shell (own session, deaf to SIGINT/SIGHUP/SIGTERM, so a Ctrl-C of `cargo test`
/// does not take it down) that polls this process every 200 ms and, once it is gone, runs
/// `kube-env.sh down DIR` and removes DIR.
fn spawn_watchdog(dir: &Path) -> Result<()> {
    const WATCHDOG: &str = r#"trap '' INT HUP TERM
while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
bash "$2" down "$3" >/dev/null 2>&1
rm -rf "$3""#;
    Command::new("setsid")
        .args(["sh", "-c", WATCHDOG, "kthena-testenv-watchdog"])
        .arg(std::process::id().to_string())
        .arg(script())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io_err("starting the control-plane watchdog (setsid sh)"))?;
    Ok(())
}

/// Runs a command to completion; its stderr goes into the error when it fails.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let command = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("running {command}")))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    Err(Error::Command {
        command,
        status: out.status,
        stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    })
}

/// The sourceable `DIR/env` written by `kube-env.sh up`: `export A=x B=y` lines, values
/// possibly quoted.
#[derive(Debug)]
pub(crate) struct EnvFile {
    path: PathBuf,
    vars: Vec<(String, String)>,
}

impl EnvFile {
    pub(crate) fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(io_err(format!("reading {}", path.display())))?;
        Ok(Self { path: path.to_owned(), vars: parse_env(&text) })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.vars.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn require(&self, name: &'static str) -> Result<&str> {
        self.get(name).ok_or_else(|| Error::MissingEnv { path: self.path.clone(), name })
    }
}

/// `KEY=VALUE` words of shell assignment lines (`export` optional, `'…'`/`"…"` stripped).
fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .flat_map(str::split_whitespace)
        .filter(|w| *w != "export")
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| {
            let v = v.trim_matches(|c| c == '"' || c == '\'');
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_env;

    #[test]
    fn env_file_lines() {
        let vars = parse_env(
            "# kube-env\nexport KUBECONFIG=/tmp/d/kubeconfig KUBECTL='/c/kubectl'\n\
             KTHENA_APISERVER_PID=\"42\"\n",
        );
        let want = [
            ("KUBECONFIG", "/tmp/d/kubeconfig"),
            ("KUBECTL", "/c/kubectl"),
            ("KTHENA_APISERVER_PID", "42"),
        ];
        let got: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
    }
}
