//! Pods of the release itself (the router, the controller, the CLI, the simulator) run as
//! local processes: a container whose image is one of ours ([`binary_for_image`]) runs the
//! matching binary of [`ProcessConfig::bin_dir`] with the container's command, args,
//! environment and volumes, authenticated as the pod's service account.
//!
//! Each pod gets a directory `<pods_dir>/<namespace>_<name>_<uid>/`:
//!
//! | Path | What |
//! |---|---|
//! | `volumes/<volume>/` | the ConfigMap, Secret and emptyDir volumes, written once at start |
//! | `root/<mountPath>` | a symbolic link per volumeMount to its volume (or its `subPath`) |
//! | `token`, `kubeconfig` | the service account's token (TokenRequest API, bound to the pod, renewed) and a kubeconfig reading it |
//! | `<container>.log` | the process's stdout and stderr |
//!
//! A process cannot mount at `/etc/...`: every word of the command, the args and the
//! environment values that is an absolute path under a volumeMount (or `--flag=PATH`) is
//! rewritten to `root/<path>`, and the process gets `KTHENA_POD_ROOT` (the `root`
//! directory) for the paths it reads by default. Its working directory is `root`.

mod env;
mod probe;
mod token;
mod volumes;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::{Client, ResourceExt as _};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::addr::Lease;
pub use token::ApiServer;

/// Environment variable naming the pod's `root` directory, under which its volumeMounts are.
pub const POD_ROOT_ENV: &str = "KTHENA_POD_ROOT";

/// The `PATH` of every process, as a container image's default.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Files our binaries read at a fixed path when no flag names them, with the environment
/// variable that names them instead: the node sets the variable to the file under the pod's
/// root when a volumeMount covers the path (and the container does not set it).
/// `kthena-router` reads Go's `/etc/config/routerConfiguration.yaml` when it exists
/// (`kthena-router/src/config/flags.rs`), which Go's chart mounts from its ConfigMap.
const DEFAULT_PATHS: &[(&str, &str, &str)] = &[(
    "kthena-router",
    "/etc/config/routerConfiguration.yaml",
    "KTHENA_ROUTER_CONFIG",
)];

/// Grace period of the processes when the node itself stops (SIGTERM, then SIGKILL).
const NODE_STOP_GRACE: Duration = Duration::from_secs(5);

/// What the node needs to run pods whose image is one of ours as local processes.
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Directory of the `kthena-router`, `kthena-controller`, `kthena` and `kthena-sim`
    /// binaries (`kthena-sim node --bin-dir`; default: the directory of `kthena-sim`).
    pub bin_dir: PathBuf,
    /// Directory under which each pod gets its own (`kthena-sim node --pods-dir`).
    pub pods_dir: PathBuf,
    /// The API server the processes talk to (from the node's own kubeconfig).
    pub api_server: ApiServer,
}

/// The binary that runs a container of `image`, if the image is one of ours: the last path
/// component of the repository (tag and digest removed, and at least one `/` before it) is
/// `kthena-router`, `kthena-controller-manager` (Go Kthena's image name; the binary is
/// `kthena-controller`), `kthena-controller`, `kthena` or `kthena-sim`. So
/// `ghcr.io/volcano-sh/kthena-router:v1.0.0` runs `kthena-router`; a bare `kthena-sim` (no
/// registry or owner) stays an engine run in-process.
#[must_use]
pub fn binary_for_image(image: &str) -> Option<&'static str> {
    let image = image.split('@').next().unwrap_or(image);
    let (path, last) = image.rsplit_once('/')?;
    if path.is_empty() {
        return None;
    }
    let name = last.split(':').next().unwrap_or(last);
    match name {
        "kthena-router" => Some("kthena-router"),
        "kthena-controller-manager" | "kthena-controller" => Some("kthena-controller"),
        "kthena" => Some("kthena"),
        "kthena-sim" => Some("kthena-sim"),
        _ => None,
    }
}

/// Whether any container of `pod` has one of our images: the pod runs as processes.
pub(super) fn is_process_pod(pod: &Pod) -> bool {
    ours(pod).next().is_some()
}

/// The containers with one of our images, with their binary.
fn ours(pod: &Pod) -> impl Iterator<Item = (&Container, &'static str)> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| Some((c, binary_for_image(c.image.as_deref()?)?)))
}

/// How a container's process is started (kept to restart it).
struct Launch {
    binary: PathBuf,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    root: PathBuf,
    log: PathBuf,
}

impl Launch {
    fn spawn(&self) -> Result<Child, String> {
        spawn(&self.binary, &self.argv, &self.env, &self.root, &self.log)
    }
}

/// One container.
struct Proc {
    name: String,
    /// The running process; `None` while it waits for its restart.
    child: Option<Child>,
    probe: Option<probe::Probe>,
    launch: Launch,
    /// When an exited process starts again.
    restart_at: Option<Instant>,
    restarts: u32,
}

/// Whether the pod's processes are restarted when they exit: `restartPolicy` `Always` (the
/// default, and a Deployment's) always, `OnFailure` for a non-zero code, `Never` never.
fn restarts(pod: &Pod, code: i32) -> bool {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => false,
        Some("OnFailure") => code != 0,
        _ => true,
    }
}

/// Kubelet's crash-loop back-off: 10 s, doubled per restart, at most 5 minutes.
fn backoff(restarts: u32) -> Duration {
    let base = Duration::from_secs(10);
    base.saturating_mul(1 << restarts.min(5))
        .min(Duration::from_secs(300))
}

/// The processes of one pod, on the pod's loopback address.
pub(super) struct PodProcesses {
    procs: Vec<Proc>,
    token: Option<token::Token>,
    lease: Lease,
}

impl PodProcesses {
    /// Prepares the pod's directory (volumes, mounts, token, kubeconfig) and starts one
    /// process per container with one of our images. Containers with other images are not
    /// run (logged).
    ///
    /// # Errors
    /// A message for the pod status when a referenced ConfigMap or Secret is missing (and not
    /// optional), the service account has no token, a command is not the image's binary, or
    /// a process cannot be started.
    pub(super) async fn start(
        client: &Client,
        config: &ProcessConfig,
        pod: &Pod,
        lease: Lease,
    ) -> Result<Self, String> {
        let dir = pod_dir(&config.pods_dir, pod);
        let root = dir.join("root");
        std::fs::create_dir_all(&root).map_err(|e| io_message("creating", &root, &e))?;
        let namespace = pod.namespace().unwrap_or_default();
        let sources = env::Sources::fetch(client, &namespace, pod).await?;
        volumes::write_volumes(&dir, pod, &sources)?;
        let token = token::Token::issue(client, pod, &dir, &config.api_server).await?;
        for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            if binary_for_image(c.image.as_deref().unwrap_or_default()).is_none() {
                tracing::warn!(pod = %pod.name_any(), container = %c.name, "Container not run: its image is not one of ours.");
            }
        }
        let mut procs = Vec::new();
        for (c, binary) in ours(pod) {
            let mounts = volumes::mount(&dir, c)?;
            let mut vars = env::container_env(pod, c, lease.ip(), &sources)?;
            for (_, v) in &mut vars {
                *v = volumes::rewrite(v, &mounts, &root);
            }
            let argv = argv(c, binary, &vars)?;
            let argv: Vec<String> = argv
                .iter()
                .map(|w| volumes::rewrite(w, &mounts, &root))
                .collect();
            let mut env = node_env(pod, &root, token.as_ref(), &config.api_server);
            env.extend(default_path_env(binary, &mounts, &root, &vars));
            env.extend(vars);
            let launch = Launch {
                binary: config.bin_dir.join(binary),
                argv,
                env,
                root: root.clone(),
                log: dir.join(format!("{}.log", c.name)),
            };
            let child = launch.spawn()?;
            tracing::info!(pod = %pod.name_any(), container = %c.name, binary, pid = child.id(), log = %launch.log.display(), "Process started.");
            procs.push(Proc {
                name: c.name.clone(),
                child: Some(child),
                probe: probe::readiness(c),
                launch,
                restart_at: None,
                restarts: 0,
            });
        }
        Ok(Self {
            procs,
            token,
            lease,
        })
    }

    /// The pod's IP.
    pub(super) fn ip(&self) -> IpAddr {
        self.lease.ip()
    }

    /// Follows the processes: one that exited is restarted after kubelet's back-off when
    /// the pod's `restartPolicy` says so (logged); otherwise its exit code (128 + the
    /// signal for a killed process, as a container runtime reports it) and a message are
    /// returned: the pod is finished.
    pub(super) fn follow(&mut self, pod: &Pod) -> Option<(i32, String)> {
        let now = Instant::now();
        for p in &mut self.procs {
            if p.restart_at.is_some_and(|at| at <= now) {
                p.restart_at = None;
                match p.launch.spawn() {
                    Ok(child) => {
                        tracing::info!(pod = %pod.name_any(), container = %p.name, restarts = p.restarts, pid = child.id(), "Process restarted.");
                        p.child = Some(child);
                    }
                    Err(e) => return Some((128, e)),
                }
            }
            let Some(child) = &mut p.child else { continue };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            p.child = None;
            let code = exit_code(status);
            let message = format!(
                "container {} exited with code {code}; its log is {}",
                p.name,
                p.launch.log.display()
            );
            if !restarts(pod, code) {
                return Some((code, message));
            }
            let delay = backoff(p.restarts);
            p.restarts += 1;
            p.restart_at = Some(now + delay);
            tracing::warn!(pod = %pod.name_any(), %message, ?delay, "Process exited; restarting after the back-off.");
        }
        None
    }

    /// Whether every process runs and passes its readiness probe (one without a probe is
    /// ready while it runs).
    pub(super) async fn ready(&self) -> bool {
        for p in &self.procs {
            if p.child.is_none() {
                return false;
            }
            if let Some(probe) = &p.probe
                && !probe::check(probe, self.ip()).await
            {
                return false;
            }
        }
        true
    }

    /// Renews the service-account token when it nears its end (logged on failure; the
    /// previous token stays until it expires).
    pub(super) async fn renew_token(&mut self, client: &Client, pod: &Pod) {
        if let Some(token) = &mut self.token {
            token.renew_if_due(client, pod).await;
        }
    }

    /// A kubelet's stop: SIGTERM to every process, SIGKILL to those still running after
    /// `grace`.
    pub(super) async fn stop(mut self, grace: Duration) {
        for p in &self.procs {
            if let Some(pid) = p.child.as_ref().and_then(Child::id) {
                sigterm(pid).await;
            }
        }
        let deadline = Instant::now() + grace;
        for p in &mut self.procs {
            let Some(child) = &mut p.child else { continue };
            if tokio::time::timeout_at(deadline, child.wait())
                .await
                .is_err()
            {
                tracing::warn!(container = %p.name, "Process killed at the end of the grace period.");
                let _ = child.kill().await;
            }
        }
    }

    /// [`PodProcesses::stop`] with the node's own grace period.
    pub(super) async fn stop_for_node(self) {
        self.stop(NODE_STOP_GRACE).await;
    }
}

/// The [`DEFAULT_PATHS`] variables of `binary` whose path a mount covers, unless `vars` (the
/// container's environment) sets them.
pub(super) fn default_path_env(
    binary: &str,
    mounts: &[String],
    root: &Path,
    vars: &[(String, String)],
) -> Vec<(String, String)> {
    DEFAULT_PATHS
        .iter()
        .filter(|(bin, _, var)| *bin == binary && !vars.iter().any(|(k, _)| k == var))
        .filter_map(|(_, path, var)| {
            let moved = volumes::rewrite(path, mounts, root);
            (moved != *path).then(|| ((*var).to_owned(), moved))
        })
        .collect()
}

/// `<pods_dir>/<namespace>_<name>_<uid>`.
fn pod_dir(pods_dir: &Path, pod: &Pod) -> PathBuf {
    pods_dir.join(format!(
        "{}_{}_{}",
        pod.namespace().unwrap_or_default(),
        pod.name_any(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    ))
}

/// The arguments after the binary, with Kubernetes' semantics: `command` replaces the
/// image's entrypoint (the binary; so its first word must name it: `kthena-router`,
/// `/kthena-router`, `/usr/local/bin/kthena-router`...), `args` replaces the image's
/// (empty) default arguments; `$(VAR)` is expanded from the container's environment.
///
/// # Errors
/// A message when `command` runs something other than the image's binary.
pub(super) fn argv(
    c: &Container,
    binary: &str,
    vars: &[(String, String)],
) -> Result<Vec<String>, String> {
    let lookup = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut words: Vec<String> = Vec::new();
    if let Some(command) = c.command.as_ref().filter(|c| !c.is_empty()) {
        let first = env::expand(&command[0], &lookup);
        let base = first.rsplit('/').next().unwrap_or(&first);
        if base != binary {
            return Err(format!(
                "container {}: command {first:?} is not the image's binary {binary:?} (the simulated node runs only our binaries)",
                c.name
            ));
        }
        words.extend(command[1..].iter().map(|w| env::expand(w, &lookup)));
    }
    words.extend(c.args.iter().flatten().map(|w| env::expand(w, &lookup)));
    Ok(words)
}

/// What the node adds to every process's environment (before the container's own):
/// `PATH`, `HOSTNAME`, `KUBERNETES_SERVICE_HOST`/`_PORT`, [`POD_ROOT_ENV`] and, with a
/// token, `KUBECONFIG`.
fn node_env(
    pod: &Pod,
    root: &Path,
    token: Option<&token::Token>,
    api: &ApiServer,
) -> Vec<(String, String)> {
    let mut vars = vec![
        ("PATH".to_owned(), PATH.to_owned()),
        ("HOSTNAME".to_owned(), pod.name_any()),
        (POD_ROOT_ENV.to_owned(), root.display().to_string()),
    ];
    if let Some((host, port)) = api.host_port() {
        vars.push(("KUBERNETES_SERVICE_HOST".to_owned(), host));
        vars.push(("KUBERNETES_SERVICE_PORT".to_owned(), port));
    }
    if let Some(t) = token {
        vars.push((
            "KUBECONFIG".to_owned(),
            t.kubeconfig().display().to_string(),
        ));
    }
    vars
}

fn spawn(
    binary: &Path,
    argv: &[String],
    env: &[(String, String)],
    root: &Path,
    log: &Path,
) -> Result<Child, String> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| io_message("opening", log, &e))?;
    let err = out
        .try_clone()
        .map_err(|e| io_message("opening", log, &e))?;
    Command::new(binary)
        .args(argv)
        .env_clear()
        .envs(env.iter().cloned())
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a Ctrl-C of the node is not the process's; the node stops
        // it.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", binary.display()))
}

/// SIGTERM through `kill(1)` (the crate forbids `unsafe`, which `kill(2)` needs).
async fn sigterm(pid: u32) {
    let sent = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = sent {
        tracing::warn!(pid, error = %e, "Sending SIGTERM failed.");
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

fn io_message(what: &str, path: &Path, e: &std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

#[cfg(test)]
mod tests;
