//! Pods as endpoints: which pods serve, at what address, and where their engine publishes
//! KV events. Pure functions of the Pod and ModelServer objects.
//!
//! Go Kthena's rules (`pkg/kthena-router/controller/modelserver_controller.go`): a pod is an
//! endpoint when it is `Running`, `Ready` and not being deleted, bound to every ModelServer of
//! its namespace whose `workloadSelector.matchLabels` selects it, at `podIP:workloadPort`
//! (the port of the first such ModelServer by `namespace/name`).
//!
//! Beyond Go: the engine's KV-event publisher is read from the pod
//! ([`kthena_kvevents::PublisherConfig`]): the first container whose command line carries
//! `--kv-events-config` with a `zmq` publisher, else the annotations
//! [`ENDPOINT_ANNOTATION`] (and [`REPLAY_ANNOTATION`]). The router subscribes at
//! `tcp://podIP:port`. Each endpoint also carries the pod's incarnation (`uid` and restart
//! count: a restarted engine is a new endpoint whose KV entries start empty) and the newest
//! running container's start time.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kthena_api::ModelServer;
use kthena_api::networking::InferenceEngine;
use kthena_kvevents::{ENDPOINT_ANNOTATION, PublisherConfig, REPLAY_ANNOTATION};

use crate::config::EndpointConfig;

/// The endpoints of the ready selected pods, and what was wrong with their KV-event settings.
#[derive(Debug, Default)]
pub(crate) struct PodEndpoints {
    /// Sorted by `namespace/name`.
    pub(crate) endpoints: Vec<EndpointConfig>,
    /// `(namespace/name@incarnation, reason)` of pods whose KV-event publisher is configured
    /// but cannot be subscribed to (the endpoint still serves, without KV events).
    pub(crate) kv_warnings: Vec<(String, String)>,
}

/// Whether a pod serves traffic: phase `Running`, condition `Ready=True`, no
/// `deletionTimestamp`, and a pod IP.
#[must_use]
pub(crate) fn pod_is_ready(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(st) = &pod.status else { return false };
    st.phase.as_deref() == Some("Running")
        && st.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        && st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The endpoints of the ready pods some ModelServer selects, sorted by `namespace/name`.
/// The port is the `workloadPort` of the first selecting ModelServer by `namespace/name`
/// (8000 for vLLM, 30000 for SGLang when 0, as Go Kthena).
#[must_use]
pub(crate) fn pod_endpoints(pods: &[Arc<Pod>], servers: &[ModelServer]) -> PodEndpoints {
    let mut servers: Vec<&ModelServer> = servers.iter().collect();
    servers.sort_by_key(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()));
    let mut out = PodEndpoints::default();
    for p in pods.iter().filter(|p| pod_is_ready(p)) {
        if let Some(ep) = pod_endpoint(p, &servers, &mut out.kv_warnings) {
            out.endpoints.push(ep);
        }
    }
    out.endpoints
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

fn pod_endpoint(
    pod: &Pod,
    servers: &[&ModelServer],
    warnings: &mut Vec<(String, String)>,
) -> Option<EndpointConfig> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let first = servers.iter().find(|s| {
        s.metadata.namespace.as_deref().unwrap_or("default") == namespace
            && s.spec
                .workload_selector
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
    })?;
    let ip: IpAddr = pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()?;
    let port = match (first.spec.workload_port.port, first.spec.inference_engine) {
        (0, InferenceEngine::SgLang) => 30000,
        (0, _) => 8000,
        (p, _) => u16::try_from(p).ok()?,
    };
    let name = pod.metadata.name.clone()?;
    let incarnation = incarnation(pod);
    let (kv_events, kv_events_replay) = kv_addresses(pod, ip, &mut |e| {
        warnings.push((format!("{namespace}/{name}@{incarnation}"), e.to_string()));
    });
    Some(EndpointConfig {
        name,
        address: SocketAddr::new(ip, port).to_string(),
        namespace,
        labels,
        kv_events,
        kv_events_replay,
        incarnation: Some(incarnation),
        container_started: crate::kv::owners::pod_container_started(pod),
    })
}

/// The KV-event publisher the pod declares (see the module docs), `None` when it declares
/// none.
///
/// # Errors
/// The first container's `--kv-events-config` that cannot be read, when no container and no
/// annotation declares a usable publisher; an annotation that cannot be read.
pub(crate) fn kv_publisher(pod: &Pod) -> Result<Option<PublisherConfig>, kthena_kvevents::Error> {
    let mut first_error = None;
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        let words: Vec<&str> = c
            .command
            .iter()
            .chain(c.args.iter())
            .flatten()
            .map(String::as_str)
            .collect();
        match PublisherConfig::from_command(&words) {
            Ok(Some(cfg)) => return Ok(Some(cfg)),
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let annotations = pod.metadata.annotations.as_ref();
    if let Some(endpoint) = annotations.and_then(|a| a.get(ENDPOINT_ANNOTATION)) {
        let replay = annotations.and_then(|a| a.get(REPLAY_ANNOTATION));
        return PublisherConfig::from_annotations(endpoint, replay.map(String::as_str)).map(Some);
    }
    first_error.map_or(Ok(None), Err)
}

/// The addresses a subscriber dials for the pod's publisher at `ip`: (events, replay). What
/// cannot be used is told to `warn`: without a usable events address there is no
/// subscription; an unusable replay address only costs the replay.
fn kv_addresses(
    pod: &Pod,
    ip: IpAddr,
    warn: &mut dyn FnMut(kthena_kvevents::Error),
) -> (Option<String>, Option<String>) {
    let cfg = match kv_publisher(pod) {
        Ok(Some(cfg)) => cfg,
        Ok(None) => return (None, None),
        Err(e) => {
            warn(e);
            return (None, None);
        }
    };
    let events = match cfg.address_at(ip) {
        Ok(a) => a,
        Err(e) => {
            warn(e);
            return (None, None);
        }
    };
    let replay = cfg.replay_address_at(ip).unwrap_or_else(|e| {
        warn(e);
        None
    });
    (Some(events), replay)
}

/// `{uid}/{restarts}`: the pod's UID and the restart count summed over its containers.
fn incarnation(pod: &Pod) -> String {
    let restarts: i64 = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| i64::from(c.restart_count))
        .sum();
    format!(
        "{}/{restarts}",
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests;
