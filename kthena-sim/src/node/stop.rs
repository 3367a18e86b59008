//! Pod termination as a kubelet does it: the grace period and the engine container's
//! `preStop` hook, read from the pod, and the hook run against the engine.
//!
//! Kubernetes' order (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination>):
//! the grace period starts when the pod gets its `deletionTimestamp`; the `preStop` hook runs
//! first, then the container gets SIGTERM, and whatever still runs at the end of the grace
//! period gets SIGKILL. The node has no processes to signal: SIGTERM is
//! [`crate::SimHandle::drain`], SIGKILL the kill at its deadline.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::pod::engine_container;
use crate::server::SimHandle;

/// Kubernetes' default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// How often the drain hook looks at the engine's running and waiting requests (the
/// ModelBooster script polls `/metrics` every 5 s; the node reads the count directly).
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// A `preStop` hook, as the node runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hook {
    /// `httpGet`: `GET path` at `port` (the engine's port when `None`) of the engine's
    /// address (or `host`); the answer is ignored, as kubelet ignores it.
    HttpGet {
        /// Request path, `/` when the hook gives none.
        path: String,
        /// The port, resolved from a named `containerPort`; `None` for the engine's port.
        port: Option<u16>,
        /// `host` of the hook (the pod IP when unset).
        host: Option<String>,
    },
    /// The `sleep` action, or an `exec` hook that is a `sleep N` command (`["sleep", "N"]`
    /// or `sh -c "sleep N"`): waits `N` seconds.
    Sleep(Duration),
    /// An `exec` hook that waits for the engine to have no running and no waiting request
    /// (it mentions `vllm:num_requests_running`, as ModelBooster's vLLM hook): waits until
    /// the engine has no request in flight.
    Drain,
    /// Any other `exec` (or `tcpSocket`) hook: the node runs no commands, so it returns at
    /// once (logged).
    Unsupported(String),
}

/// The grace period of a deleting pod: `metadata.deletionGracePeriodSeconds` (what the
/// delete request asked for, else the pod's `terminationGracePeriodSeconds`), else
/// `spec.terminationGracePeriodSeconds`, else 30 s. Negative values count as 0.
pub(super) fn grace_period(pod: &Pod) -> Duration {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
        .map_or(DEFAULT_GRACE, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or(0))
        })
}

/// The engine container's `lifecycle.preStop` hook, if it has one.
pub(super) fn pre_stop(pod: &Pod) -> Option<Hook> {
    let container = engine_container(pod)?;
    let handler = container.lifecycle.as_ref()?.pre_stop.as_ref()?;
    Some(hook(container, handler))
}

fn hook(container: &Container, handler: &LifecycleHandler) -> Hook {
    if let Some(get) = &handler.http_get {
        let port = match &get.port {
            IntOrString::Int(p) => u16::try_from(*p).ok(),
            IntOrString::String(name) => named_port(container, name),
        };
        return Hook::HttpGet {
            path: get.path.clone().unwrap_or_else(|| "/".to_owned()),
            port,
            host: get.host.clone().filter(|h| !h.is_empty()),
        };
    }
    if let Some(sleep) = &handler.sleep {
        return Hook::Sleep(Duration::from_secs(
            u64::try_from(sleep.seconds).unwrap_or(0),
        ));
    }
    let Some(command) = handler.exec.as_ref().and_then(|e| e.command.as_ref()) else {
        return Hook::Unsupported("a tcpSocket or empty hook".to_owned());
    };
    let text = command.join(" ");
    if text.contains("num_requests_running") {
        return Hook::Drain;
    }
    let words: Vec<&str> = text.split_whitespace().collect();
    let seconds = words
        .iter()
        .position(|w| w.trim_matches(|c| c == '"' || c == '\'') == "sleep")
        .and_then(|i| words.get(i + 1))
        .and_then(|w| {
            w.trim_matches(|c| c == '"' || c == '\'' || c == ';')
                .parse::<f64>()
                .ok()
        })
        .filter(|s| s.is_finite() && *s >= 0.0);
    match seconds {
        Some(s) => Hook::Sleep(Duration::from_secs_f64(s)),
        None => Hook::Unsupported(text),
    }
}

fn named_port(container: &Container, name: &str) -> Option<u16> {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .and_then(|p| u16::try_from(p.container_port).ok())
}

/// Runs `hook` against `engine` and returns when it is done (the caller bounds it by the
/// grace period). A failed `httpGet` is logged, as kubelet logs a failed hook.
pub(super) async fn run(hook: &Hook, engine: &SimHandle, pod: &str) {
    match hook {
        Hook::HttpGet { path, port, host } => {
            let addr = engine.addr();
            let port = port.unwrap_or(addr.port());
            let host = host.clone().unwrap_or_else(|| addr.ip().to_string());
            let url = format!("http://{}{path}", host_port(&host, port));
            let Ok(uri) = url.parse::<http::Uri>() else {
                tracing::warn!(pod, %url, "preStop httpGet: not a valid URL.");
                return;
            };
            let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
            match client.get(uri).await {
                Ok(resp) => {
                    tracing::info!(pod, %url, status = %resp.status(), "preStop httpGet answered.");
                }
                Err(e) => tracing::warn!(pod, %url, error = %e, "preStop httpGet failed."),
            }
        }
        Hook::Sleep(d) => tokio::time::sleep(*d).await,
        Hook::Drain => {
            while engine.in_flight() > 0 {
                tokio::time::sleep(DRAIN_POLL).await;
            }
        }
        Hook::Unsupported(what) => {
            tracing::info!(pod, hook = %what, "preStop hook not run by the simulated node.");
        }
    }
}

fn host_port(host: &str, port: u16) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests;
