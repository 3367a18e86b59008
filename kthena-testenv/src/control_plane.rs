//! Starting (or reusing) the control plane: `scripts/kube-env.sh up DIR`, a watchdog that
//! runs `down DIR` when the test process is gone, and reading `DIR/env`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::{Error, Result, io_err, kube_err};

/// Environment variable naming the kubeconfig of a running cluster to reuse instead of
/// starting a control plane (nothing is started or stopped then).
pub const REUSE_ENV: &str = "KTHENA_TEST_KUBECONFIG";

/// Environment variable overriding the build cache of `scripts/kube-env.sh`.
pub const CACHE_ENV: &str = "KTHENA_K8S_CACHE";

/// Default build cache of `scripts/kube-env.sh`.
pub const DEFAULT_CACHE: &str = "/var/cache/kthena/k8s";

/// A control plane: its kubeconfig and kubectl, and when this process started it, its
/// directory (`kube-env.sh up DIR`).
///
/// [`TestEnv`](crate::TestEnv) holds the one shared by a test binary; [`ControlPlane::start`]
/// gives a test one of its own, e.g. to stop and restart its API server. Dropping a
/// `ControlPlane` that this process started stops it (`kube-env.sh down`); a watchdog does
/// the same if the process dies first.
#[derive(Debug)]
pub struct ControlPlane {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    gateway_api_crds: PathBuf,
    dir: Option<PathBuf>,
    startup: Duration,
}

impl ControlPlane {
    /// Starts a new control plane (for this caller alone) and installs the CRDs, like the
    /// shared one of [`TestEnv::get`](crate::TestEnv::get). Runs on a blocking-pool thread.
    ///
    /// # Errors
    /// As [`TestEnv::get`](crate::TestEnv::get).
    pub async fn start() -> Result<Self> {
        tokio::task::spawn_blocking(|| Self::start_blocking(false))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// Starts a control plane (or, when `reuse` and `$KTHENA_TEST_KUBECONFIG` is set, uses that
    /// cluster) and installs the CRDs, on a Tokio runtime of its own.
    pub(crate) fn start_blocking(reuse: bool) -> Result<Self> {
        let t0 = Instant::now();
        let mut plane = match std::env::var_os(REUSE_ENV) {
            Some(kubeconfig) if reuse => Self::reused(PathBuf::from(kubeconfig)),
            _ => Self::up()?,
        };
        let crds = crate::crds::all_crds(&plane.gateway_api_crds)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_err("building a Tokio runtime"))?;
        rt.block_on(async {
            let client = plane.client().await?;
            crate::crds::install(&client, &crds).await
        })?;
        plane.startup = t0.elapsed();
        tracing::info!(
            startup_ms = plane.startup.as_millis(),
            kubeconfig = %plane.kubeconfig.display(),
            crds = crds.len(),
            "Test control plane ready."
        );
        Ok(plane)
    }

    fn reused(kubeconfig: PathBuf) -> Self {
        let kubectl =
            std::env::var_os("KUBECTL").map_or_else(|| cache_dir().join("kubectl"), PathBuf::from);
        Self {
            kubeconfig,
            kubectl,
            gateway_api_crds: cache_dir().join("crds/gateway-api"),
            dir: None,
            startup: Duration::ZERO,
        }
    }

    /// Runs `kube-env.sh up` in a fresh directory and arms the watchdog.
    fn up() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("kthena-testenv-")
            .tempdir()
            .map_err(io_err("creating the control-plane directory"))?
            .keep();
        // The watchdog first, so that a failing `up` is cleaned up too.
        spawn_watchdog(&dir)?;
        run(Command::new("bash").arg(script()).arg("up").arg(&dir))?;
        let env = EnvFile::read(&dir.join("env"))?;
        Ok(Self {
            kubeconfig: env
                .get("KUBECONFIG")
                .map_or_else(|| dir.join("kubeconfig"), PathBuf::from),
            kubectl: env.require("KUBECTL").map(PathBuf::from)?,
            gateway_api_crds: env
                .get("KTHENA_GATEWAY_API_CRDS")
                .map_or_else(|| cache_dir().join("crds/gateway-api"), PathBuf::from),
            dir: Some(dir),
            startup: Duration::ZERO,
        })
    }

    /// A new client of the cluster (cluster-admin), bound to the caller's Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Kubeconfig`] if the kubeconfig cannot be read or used.
    pub async fn client(&self) -> Result<Client> {
        let path = &self.kubeconfig;
        let err = |source| Error::Kubeconfig {
            path: path.clone(),
            source,
        };
        let kubeconfig = Kubeconfig::read_from(path).map_err(err)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(err)?;
        Client::try_from(config).map_err(kube_err("building a client"))
    }

    /// Path of the cluster's kubeconfig (cluster-admin token, CA embedded).
    #[must_use]
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Path of the `kubectl` binary.
    #[must_use]
    pub fn kubectl_path(&self) -> &Path {
        &self.kubectl
    }

    /// A `kubectl` command with `--kubeconfig` set.
    #[must_use]
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// Wall time spent starting the control plane and installing the CRDs (only the CRDs for
    /// a reused cluster).
    #[must_use]
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// The control plane's directory (`kube-env.sh up DIR`, with `apiserver.log`, `etcd.log`,
    /// `env`); `None` for a reused cluster.
    #[must_use]
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Stops kube-apiserver only (`kube-env.sh stop-apiserver`); etcd keeps the data.
    ///
    /// # Errors
    /// [`Error::NotOwned`] for a reused cluster, [`Error::Command`] if the script fails.
    pub async fn stop_apiserver(&self) -> Result<()> {
        self.script_blocking("stop-apiserver").await
    }

    /// Starts kube-apiserver again on the same port with the same flags
    /// (`kube-env.sh start-apiserver`) and waits for `/readyz`.
    ///
    /// # Errors
    /// As [`ControlPlane::stop_apiserver`].
    pub async fn start_apiserver(&self) -> Result<()> {
        self.script_blocking("start-apiserver").await
    }

    /// Starts kube-controller-manager against this control plane (`kube-env.sh
    /// controller-manager`: Deployments, ReplicaSets, garbage collection, namespaces,
    /// service accounts); it stops with the control plane. The shared control plane of
    /// [`TestEnv`](crate::TestEnv) never runs one.
    ///
    /// # Errors
    /// As [`ControlPlane::stop_apiserver`] (the binary not built: `scripts/kube-env.sh build`).
    pub async fn start_controller_manager(&self) -> Result<()> {
        self.script_blocking("controller-manager").await
    }

    async fn script_blocking(&self, verb: &'static str) -> Result<()> {
        let dir = self.dir.clone().ok_or(Error::NotOwned)?;
        tokio::task::spawn_blocking(move || {
            run(Command::new("bash").arg(script()).arg(verb).arg(&dir)).map(drop)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            if let Err(e) = run(Command::new("bash").arg(script()).arg("down").arg(dir)) {
                tracing::warn!(error = %e, "Stopping the control plane failed.");
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The build cache directory (`$KTHENA_K8S_CACHE` or `/var/cache/kthena/k8s`).
fn cache_dir() -> PathBuf {
    std::env::var_os(CACHE_ENV).map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from)
}

/// `scripts/kube-env.sh` of this workspace.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kube-env.sh")
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
        let text =
            std::fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
        Ok(Self {
            path: path.to_owned(),
            vars: parse_env(&text),
        })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn require(&self, name: &'static str) -> Result<&str> {
        self.get(name).ok_or_else(|| Error::MissingEnv {
            path: self.path.clone(),
            name,
        })
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
mod tests;
