//! One task per pod: starts its engine, writes its status, follows its annotations, notices
//! the engine's exit, and terminates the pod as a kubelet does once it is deleting (not
//! Ready, `preStop`, the engine drained within the grace period, then removed).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::addr::{Lease, spawn_on_free_ip, take_ip};
use super::pod::{engine_config, exit_requested, ready_wanted, running_status, terminated_status};
use super::process::{PodProcesses, ProcessConfig, is_process_pod};
use super::stop;
use crate::config::Config;
use crate::server::SimHandle;

/// How long an engine may take to answer `/health` after it started.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one `/health` request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Consecutive failed probes after which the engine counts as exited (kubelet's default
/// `failureThreshold`).
const FAILURE_THRESHOLD: u32 = 3;

/// Running engines by `namespace/name`.
pub(super) type Engines = Arc<Mutex<HashMap<String, Arc<SimHandle>>>>;

/// What every pod task shares.
pub(super) struct Ctx {
    pub(super) client: Client,
    pub(super) base: Config,
    pub(super) health_interval: Duration,
    pub(super) engines: Engines,
    pub(super) processes: Option<ProcessConfig>,
}

/// A pod's running engine and its address.
struct Engine {
    handle: Arc<SimHandle>,
    _lease: Lease,
    key: String,
}

impl Engine {
    fn addr(&self) -> SocketAddr {
        self.handle.addr()
    }

    async fn stop(self, engines: &Engines) {
        lock(engines).remove(&self.key);
        self.handle.kill_shared().await;
    }
}

/// What runs for a pod: an in-process engine, or the processes of a pod of ours.
enum Workload {
    Engine(Engine),
    Processes(PodProcesses),
}

impl Workload {
    fn ip(&self) -> IpAddr {
        match self {
            Self::Engine(e) => e.addr().ip(),
            Self::Processes(p) => p.ip(),
        }
    }

    /// Stops it at once (the node stopping, or an exit): an engine is killed, processes
    /// get SIGTERM and a short grace period.
    async fn stop(self, engines: &Engines) {
        match self {
            Self::Engine(e) => e.stop(engines).await,
            Self::Processes(p) => p.stop_for_node().await,
        }
    }
}

fn lock(engines: &Engines) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SimHandle>>> {
    engines
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Runs the pod until it is deleted (`cancel`) or, once it is deleting, removes it.
pub(super) async fn supervise(
    ctx: Arc<Ctx>,
    mut pods: watch::Receiver<Pod>,
    cancel: CancellationToken,
) {
    let pod = pods.borrow_and_update().clone();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    if pod.metadata.deletion_timestamp.is_some() {
        delete_now(&api, &pod).await;
        return;
    }
    let mut run = PodRun::start(ctx, api, &pod, &cancel).await;
    let mut ticks = tokio::time::interval(run.ctx.health_interval);
    loop {
        let pod = pods.borrow_and_update().clone();
        if pod.metadata.deletion_timestamp.is_some() {
            let terminated = tokio::select! {
                () = cancel.cancelled() => false,
                () = run.terminate_gracefully(&pod) => true,
            };
            if terminated {
                delete_now(&run.api, &pod).await;
                return;
            }
            break;
        }
        run.sync(&pod).await;
        tokio::select! {
            () = cancel.cancelled() => break,
            changed = pods.changed() => if changed.is_err() { break },
            _ = ticks.tick() => run.check_health(&pod).await,
        }
    }
    run.stop_engine().await;
}

/// A pod's engine and what the node last wrote about it.
struct PodRun {
    ctx: Arc<Ctx>,
    api: Api<Pod>,
    name: String,
    started: Time,
    engine: Option<Workload>,
    /// The readiness probes' last result (for an engine: whether it has loaded; its
    /// `/health` is checked instead).
    probed_ready: bool,
    /// The `Ready` value last written while the engine runs.
    ready_written: Option<bool>,
    /// A terminated status not written yet (the patch failed): retried by `sync`.
    unwritten: Option<PodStatus>,
    /// Consecutive failed `/health` probes.
    failures: u32,
}

impl PodRun {
    /// Starts the engine; a failure to start is written as a terminated container.
    async fn start(ctx: Arc<Ctx>, api: Api<Pod>, pod: &Pod, cancel: &CancellationToken) -> Self {
        let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let mut run = Self {
            name: pod.name_any(),
            started: now(),
            engine: None,
            probed_ready: false,
            ready_written: None,
            unwritten: None,
            failures: 0,
            api,
            ctx,
        };
        let started = if is_process_pod(pod) {
            start_processes(&run.ctx, pod).await
        } else {
            start(&run.ctx, pod, &key, cancel).await.map(|e| {
                // An engine still loading (`--startup-delay-ms`) turns Ready once `/health`
                // answers.
                run.probed_ready = e.handle.is_loaded();
                Workload::Engine(e)
            })
        };
        match started {
            Ok(workload) => run.engine = Some(workload),
            Err(message) => {
                tracing::warn!(pod = %key, %message, "Engine failed to start.");
                run.terminate(pod, 1, &message).await;
            }
        }
        run
    }

    /// Writes what the pod's annotations ask for: an exit, or the Ready value.
    async fn sync(&mut self, pod: &Pod) {
        if let Some(status) = self.unwritten.take() {
            self.write_terminal(status).await;
        }
        if let Some(code) = exit_requested(pod).filter(|_| self.engine.is_some()) {
            self.terminate(
                pod,
                code,
                &format!("exit code {code} requested by annotation"),
            )
            .await;
        }
        let Some(engine) = &self.engine else { return };
        let want = ready_wanted(pod) && self.probed_ready;
        if self.ready_written != Some(want) {
            let status = running_status(pod, engine.ip(), want, &self.started, &now());
            if patch_status(&self.api, &self.name, &status).await {
                self.ready_written = Some(want);
            }
        }
    }

    /// An engine that fails [`FAILURE_THRESHOLD`] `/health` probes in a row has exited
    /// (code 1); one still loading its model (`--startup-delay-ms`) is not Ready yet, as a
    /// pod whose startup probe has not passed.
    async fn check_health(&mut self, pod: &Pod) {
        if let Some(Workload::Processes(procs)) = &mut self.engine {
            if let Some((code, message)) = procs.follow(pod) {
                self.terminate(pod, code, &message).await;
                return;
            }
            self.probed_ready = procs.ready().await;
            procs.renew_token(&self.ctx.client, pod).await;
            return;
        }
        let Some(Workload::Engine(engine)) = &self.engine else {
            return;
        };
        if !engine.handle.is_loaded() {
            self.probed_ready = false;
            return;
        }
        if healthy(engine.addr()).await {
            self.failures = 0;
            self.probed_ready = true;
            return;
        }
        self.failures += 1;
        if self.failures >= FAILURE_THRESHOLD {
            self.terminate(pod, 1, "the engine stopped answering /health")
                .await;
        }
    }

    /// A kubelet's pod termination, within the pod's grace period: the pod turns NotReady
    /// (the podIP stays), the engine container's `preStop` hook runs, then the engine gets
    /// the equivalent of SIGTERM ([`SimHandle::drain`]: no new work, what is in flight
    /// finishes) and is killed at the end of the grace period if it is not done.
    async fn terminate_gracefully(&mut self, pod: &Pod) {
        let deadline = tokio::time::Instant::now() + stop::grace_period(pod);
        if matches!(self.engine, Some(Workload::Processes(_))) {
            return self.terminate_processes(pod).await;
        }
        let Some(Workload::Engine(engine)) = &self.engine else {
            return;
        };
        let handle = Arc::clone(&engine.handle);
        let key = engine.key.clone();
        let status = running_status(pod, handle.addr().ip(), false, &self.started, &now());
        if patch_status(&self.api, &self.name, &status).await {
            self.ready_written = Some(false);
        }
        if let Some(hook) = stop::pre_stop(pod) {
            let ran = tokio::time::timeout_at(deadline, stop::run(&hook, &handle, &key)).await;
            if ran.is_err() {
                tracing::warn!(pod = %key, ?hook, "preStop hook still running at the end of the grace period.");
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if handle.drain(left).await {
            tracing::info!(pod = %key, "Engine drained.");
        } else {
            tracing::warn!(pod = %key, grace = ?stop::grace_period(pod), "Engine killed at the end of the grace period.");
        }
        self.stop_engine().await;
    }

    /// A deleting pod of processes: NotReady, then SIGTERM, and SIGKILL at the end of the
    /// grace period (no `preStop` hook runs).
    async fn terminate_processes(&mut self, pod: &Pod) {
        let Some(Workload::Processes(procs)) = self.engine.take() else {
            return;
        };
        let status = running_status(pod, procs.ip(), false, &self.started, &now());
        if patch_status(&self.api, &self.name, &status).await {
            self.ready_written = Some(false);
        }
        procs.stop(stop::grace_period(pod)).await;
        tracing::info!(pod = %self.name, "Processes stopped.");
    }

    /// Stops the engine and writes the containers as terminated with `exit_code`.
    async fn terminate(&mut self, pod: &Pod, exit_code: i32, message: &str) {
        let ip = self.engine.as_ref().map(Workload::ip);
        self.stop_engine().await;
        let status = terminated_status(pod, ip, exit_code, message, &self.started, &now());
        self.write_terminal(status).await;
    }

    async fn write_terminal(&mut self, status: PodStatus) {
        if !patch_status(&self.api, &self.name, &status).await {
            self.unwritten = Some(status);
        }
    }

    async fn stop_engine(&mut self) {
        if let Some(e) = self.engine.take() {
            e.stop(&self.ctx.engines).await;
        }
    }
}

/// Starts the processes of a pod of ours on a free loopback address.
async fn start_processes(ctx: &Ctx, pod: &Pod) -> Result<Workload, String> {
    let config = ctx.processes.as_ref().ok_or(
        "the pod's image is one of ours, which runs as a local process, but this node runs no processes (NodeConfig::processes)",
    )?;
    let lease = take_ip().ok_or("no free loopback address")?;
    PodProcesses::start(&ctx.client, config, pod, lease)
        .await
        .map(Workload::Processes)
}

/// Starts the engine and waits until it answers `/health` (200, or 503 while its model
/// loads).
async fn start(
    ctx: &Ctx,
    pod: &Pod,
    key: &str,
    cancel: &CancellationToken,
) -> Result<Engine, String> {
    let config = engine_config(pod, &ctx.base)?;
    let (handle, lease) = spawn_on_free_ip(config)
        .await
        .map_err(|e| kthena_api::error_chain(&e))?;
    let handle = Arc::new(handle);
    let engine = Engine {
        handle: Arc::clone(&handle),
        _lease: lease,
        key: key.to_owned(),
    };
    let deadline = tokio::time::Instant::now() + HEALTH_TIMEOUT;
    while health(engine.addr()).await.is_none() {
        if tokio::time::Instant::now() >= deadline || cancel.is_cancelled() {
            engine.stop(&ctx.engines).await;
            return Err(format!(
                "the engine did not answer /health within {HEALTH_TIMEOUT:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lock(&ctx.engines).insert(key.to_owned(), handle);
    tracing::info!(pod = key, addr = %engine.addr(), "Engine started.");
    Ok(engine)
}

/// `GET /health` answers 200.
async fn healthy(addr: SocketAddr) -> bool {
    health(addr).await == Some(http::StatusCode::OK)
}

/// The status of `GET /health`, `None` when nothing answers within the probe timeout.
async fn health(addr: SocketAddr) -> Option<http::StatusCode> {
    let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri = format!("http://{addr}/health").parse::<http::Uri>().ok()?;
    match tokio::time::timeout(PROBE_TIMEOUT, client.get(uri)).await {
        Ok(Ok(resp)) => Some(resp.status()),
        _ => None,
    }
}

/// Merge-patches the status subresource; false (logged) on failure, to retry later.
async fn patch_status(api: &Api<Pod>, name: &str, status: &PodStatus) -> bool {
    let body = serde_json::json!({ "status": status });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(pod = name, error = %e, "Writing the pod status failed.");
            false
        }
    }
}

/// Deletes a deleting pod with grace period 0 (what a kubelet does once its containers are
/// gone), only if it is still the same pod (UID precondition).
async fn delete_now(api: &Api<Pod>, pod: &Pod) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => tracing::warn!(pod = %pod.name_any(), error = %e, "Deleting the pod failed."),
    }
}
