//! The simulated node: makes the pods of a Kubernetes cluster that has no kubelet (a test
//! control plane) real, by running a kthena-sim engine for each.
//!
//! [`SimNode::start`] watches the pods selected by [`NodeConfig`] (node name, namespace,
//! label selector; all three optional, combined with AND). For each pod that is not finished
//! it starts an engine in-process on a loopback address of its own (127.0.0.2, 127.0.0.3,
//! ..., the lowest free one; freed when the pod goes) at the pod's container port, waits for
//! `/health`, then writes the pod status: `podIP`/`podIPs`, `hostIP` 127.0.0.1,
//! `phase: Running`, running `containerStatuses` and the `Ready` condition. The engine
//! container (Kthena's runtime sidecar skipped) and the engine flags come from the pod (see
//! `docs/simulator.md`, "Simulated node").
//!
//! Test hooks, as pod annotations:
//! * [`READY_ANNOTATION`] `"false"`: the pod turns (or starts) NotReady, the engine keeps
//!   serving; removing it or any other value makes it Ready again.
//! * [`EXIT_ANNOTATION`] `"<code>"`: the engine stops and the containers show as terminated
//!   with that exit code (phase `Failed`, or `Succeeded` for 0); no restart.
//! * [`ARGS_ANNOTATION`] `"<kthena-sim flags>"`: engine flags that replace the node's
//!   defaults; the pod's own model and port still apply unless the annotation writes
//!   `--model` or `--port`.
//!
//! An engine that stops answering `/health` is reported the same way as an exit (code 1). A
//! pod with a `deletionTimestamp` is terminated as a kubelet does: it turns NotReady, the
//! engine container's `preStop` hook runs (`httpGet` against the engine, `sleep`, a `sleep N`
//! or ModelBooster's drain command; other commands are not run), then the engine drains (no
//! new work, in-flight requests finish), all within the pod's grace period (the engine is
//! killed at its end); then the pod is deleted with grace period 0 (there is no kubelet to
//! finish the deletion). Stopping the node stops the engines and leaves the pods as they
//! are.

mod addr;
mod pod;
mod process;
mod stop;
mod supervisor;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Faults};
use crate::server::SimHandle;
use supervisor::{Ctx, Engines, supervise};

pub use process::{ApiServer, POD_ROOT_ENV, ProcessConfig, binary_for_image};

/// Pod annotation: `"false"` makes the pod NotReady (the engine keeps running).
pub const READY_ANNOTATION: &str = "sim.kthena.io/ready";
/// Pod annotation: an integer; the engine exits with it as the containers' exit code.
pub const EXIT_ANNOTATION: &str = "sim.kthena.io/exit-code";
/// Pod annotation: kthena-sim flags for the pod's engine (e.g. `--role prefill --time-scale 10`).
pub const ARGS_ANNOTATION: &str = "sim.kthena.io/args";

/// Which pods a [`SimNode`] runs, and the engines' defaults.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Only pods with `spec.nodeName` equal to this.
    pub node_name: Option<String>,
    /// Only pods of this namespace (all namespaces when unset).
    pub namespace: Option<String>,
    /// Only pods matching this label selector (`app=vllm,tier!=x`).
    pub selector: Option<String>,
    /// Engine flags used unless the pod gives kthena-sim flags (its command is `kthena-sim`,
    /// or it has the [`ARGS_ANNOTATION`]); the model, flavor and port come from the pod.
    /// `host` and `port` are ignored.
    pub engine: Config,
    /// How often each engine's `/health` (and each process's readiness probe) is probed
    /// (wall time).
    pub health_interval: Duration,
    /// How pods whose image is one of ours ([`binary_for_image`]) run as local processes;
    /// `None`: such pods fail (their containers terminate with a message saying so).
    pub processes: Option<ProcessConfig>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            node_name: None,
            namespace: None,
            selector: None,
            engine: Config::default(),
            health_interval: Duration::from_millis(500),
            processes: None,
        }
    }
}

/// A running simulated node. Dropping it stops watching and stops the engines (without
/// waiting); [`SimNode::stop`] waits.
#[derive(Debug)]
pub struct SimNode {
    cancel: CancellationToken,
    tracker: TaskTracker,
    engines: Engines,
}

impl SimNode {
    /// Starts watching pods with `client` and running their engines, on the current Tokio
    /// runtime. Watch errors are retried with backoff.
    #[must_use]
    pub fn start(client: Client, config: NodeConfig) -> Self {
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let engines: Engines = Arc::default();
        let ctx = Arc::new(Ctx {
            client,
            base: config.engine.clone(),
            health_interval: config.health_interval,
            engines: Arc::clone(&engines),
            processes: config.processes.clone(),
        });
        tracker.spawn(watch_pods(ctx, config, cancel.clone(), tracker.clone()));
        Self {
            cancel,
            tracker,
            engines,
        }
    }

    /// The engine address of pod `namespace/name` while its engine runs.
    #[must_use]
    pub fn engine_addr(&self, namespace: &str, name: &str) -> Option<SocketAddr> {
        self.engine(namespace, name).map(|e| e.addr())
    }

    /// Requests the engine of pod `namespace/name` refused because its model was still
    /// loading (`--startup-delay-ms`), while its engine runs.
    #[must_use]
    pub fn requests_while_loading(&self, namespace: &str, name: &str) -> Option<u64> {
        self.engine(namespace, name)
            .map(|e| e.requests_while_loading())
    }

    /// Replaces the fault-injection settings of the engine of pod `namespace/name`; false if
    /// it has no running engine.
    pub fn set_faults(&self, namespace: &str, name: &str, faults: Faults) -> bool {
        self.engine(namespace, name)
            .map(|e| e.set_faults(faults))
            .is_some()
    }

    /// Kills the engine of pod `namespace/name` behind the node's back, as a crash: the node
    /// finds out through `/health` (3 failed probes) and reports the container as exited
    /// with code 1. False if the pod has no running engine.
    pub async fn crash_engine(&self, namespace: &str, name: &str) -> bool {
        let Some(engine) = self.engine(namespace, name) else {
            return false;
        };
        engine.kill_shared().await;
        true
    }

    fn engine(&self, namespace: &str, name: &str) -> Option<Arc<SimHandle>> {
        let engines = self
            .engines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        engines.get(&format!("{namespace}/{name}")).cloned()
    }

    /// Stops watching and stops every engine; the pods keep their last status.
    pub async fn stop(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A pod task: the latest pod object goes in, `cancel` ends it.
struct PodTask {
    pods: watch::Sender<Pod>,
    cancel: CancellationToken,
}

async fn watch_pods(
    ctx: Arc<Ctx>,
    config: NodeConfig,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let api: Api<Pod> = match &config.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let mut wc = watcher::Config::default();
    if let Some(node) = &config.node_name {
        wc = wc.fields(&format!("spec.nodeName={node}"));
    }
    if let Some(selector) = &config.selector {
        wc = wc.labels(selector);
    }
    // A kubelet's pace: after an API server restart the pods are served again within
    // seconds, not after kube-runtime's default back-off of up to 30 s (doubled by jitter).
    let backoff = watcher::ExponentialBackoff::from(
        backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(2))
            .with_jitter()
            .without_max_times(),
    );
    let mut events = std::pin::pin!(watcher(api, wc).backoff(backoff));
    let mut tasks: HashMap<String, PodTask> = HashMap::new();
    let mut relisted: Option<HashSet<String>> = None;
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => break,
            e = events.next() => e,
        };
        match event {
            Some(Ok(Event::Init)) => relisted = Some(HashSet::new()),
            Some(Ok(Event::InitApply(pod))) => {
                if let Some(seen) = &mut relisted {
                    seen.insert(uid(&pod));
                }
                apply(&ctx, &tracker, &cancel, &mut tasks, pod);
            }
            Some(Ok(Event::InitDone)) => {
                // Pods gone while the watch was down.
                let seen = relisted.take().unwrap_or_default();
                tasks.retain(|uid, task| {
                    seen.contains(uid) || {
                        task.cancel.cancel();
                        false
                    }
                });
            }
            Some(Ok(Event::Apply(pod))) => apply(&ctx, &tracker, &cancel, &mut tasks, pod),
            Some(Ok(Event::Delete(pod))) => {
                if let Some(task) = tasks.remove(&uid(&pod)) {
                    task.cancel.cancel();
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "Watching pods failed; retrying."),
            None => break,
        }
    }
    for task in tasks.into_values() {
        task.cancel.cancel();
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Hands the pod to its task, or starts one for a new unfinished pod; a deleting pod
/// without a task (finished, or never run) is removed at once.
fn apply(
    ctx: &Arc<Ctx>,
    tracker: &TaskTracker,
    node: &CancellationToken,
    tasks: &mut HashMap<String, PodTask>,
    pod: Pod,
) {
    let uid = uid(&pod);
    if let Some(task) = tasks.get(&uid) {
        task.pods.send_replace(pod);
        return;
    }
    let deleting = pod.metadata.deletion_timestamp.is_some();
    if pod::is_finished(&pod) && !deleting {
        return;
    }
    let cancel = node.child_token();
    let (tx, rx) = watch::channel(pod);
    tracker.spawn(supervise(Arc::clone(ctx), rx, cancel.clone()));
    tasks.insert(uid, PodTask { pods: tx, cancel });
}
