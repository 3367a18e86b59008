//! What the routers report for scale to zero: the ready endpoints of the router metrics
//! Service (its EndpointSlices), each scraped at `http://<address>:<port>/metrics` (3 s
//! timeout, as pod scrapes), read into a [`RouterSample`]: the held requests
//! (`kthena_router_cold_start_held_requests{model, model_server}`, summed over `model`) and
//! the idle seconds (`kthena_router_model_server_idle_seconds{model_server}`) per
//! ModelServer. Not in Go Kthena v1.0.0, whose autoscaler reads no router.

use std::collections::BTreeSet;
use std::str::FromStr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kthena_autoscale::{RouterAnswer, RouterSample};
use kube::api::{Api, ListParams};

use super::collect::{HttpClient, scrape};
use crate::error::{Error, Result, kube_err};

/// Router family: requests held now because the ModelServer has no ready endpoint.
pub const HELD_FAMILY: &str = "kthena_router_cold_start_held_requests";
/// Router family: seconds since a request routed to the ModelServer last ended.
pub const IDLE_FAMILY: &str = "kthena_router_model_server_idle_seconds";
/// Label of both families naming the ModelServer (`namespace/name`).
const SERVER_LABEL: &str = "model_server";
/// Label every EndpointSlice of a Service carries (Kubernetes `discovery.k8s.io/v1`).
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Name of the slice port scraped when present (else the first port).
const METRICS_PORT: &str = "metrics";

/// The Service in front of the routers' metrics listeners (`--router-metrics-service
/// <namespace>/<name>`; the chart's `kthena-router-metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterMetrics {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
}

impl FromStr for RouterMetrics {
    type Err = Error;

    /// `<namespace>/<name>`, both non-empty.
    ///
    /// # Errors
    /// [`Error::RouterMetricsService`] for any other text.
    fn from_str(s: &str) -> Result<Self> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self {
                    namespace: ns.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(Error::RouterMetricsService(s.to_owned())),
        }
    }
}

impl std::fmt::Display for RouterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `host:port` of every ready endpoint address of `slices` (an endpoint whose `ready`
/// condition is absent counts as ready, as Kubernetes defines it), the port named `metrics`
/// else the slice's first; sorted, without duplicates.
pub(super) fn endpoints(slices: &[EndpointSlice]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for s in slices {
        let ports = s.ports.as_deref().unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some(METRICS_PORT))
            .or_else(|| ports.first())
            .and_then(|p| p.port);
        let Some(port) = port else { continue };
        for e in s.endpoints.iter().flatten() {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &e.addresses {
                let host = if a.contains(':') {
                    format!("[{a}]")
                } else {
                    a.clone()
                };
                out.insert(format!("{host}:{port}"));
            }
        }
    }
    out.into_iter().collect()
}

/// The sample in a router's `/metrics` text; `None` when it is not metrics text.
pub(super) fn sample(text: &str) -> Option<RouterSample> {
    let mut out = RouterSample::default();
    for s in kthena_engine_metrics::series(text, HELD_FAMILY)? {
        if let Some(server) = s.labels.get(SERVER_LABEL) {
            *out.held.entry(server.clone()).or_default() += s.value;
        }
    }
    for s in kthena_engine_metrics::series(text, IDLE_FAMILY)? {
        if let Some(server) = s.labels.get(SERVER_LABEL) {
            out.idle.insert(server.clone(), s.value);
        }
    }
    Some(out)
}

/// Scrapes every ready router endpoint of `svc`, in parallel: one answer per endpoint.
///
/// # Errors
/// [`Error::Kube`] when the EndpointSlices cannot be listed.
pub(super) async fn scrape_routers(
    kube: &kube::Client,
    http: &HttpClient,
    svc: &RouterMetrics,
) -> Result<Vec<RouterAnswer>> {
    let api: Api<EndpointSlice> = Api::namespaced(kube.clone(), &svc.namespace);
    let selector = format!("{SERVICE_NAME_LABEL}={}", svc.name);
    let slices = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube_err(format!(
            "listing the EndpointSlices of Service {svc}"
        )))?;
    let asks = endpoints(&slices.items)
        .into_iter()
        .map(|router| async move {
            let text = scrape(http, &format!("http://{router}/metrics")).await;
            let sample = text.as_deref().and_then(sample);
            if sample.is_none() {
                tracing::info!(%router, "Router metrics gave no answer this round");
            }
            RouterAnswer { router, sample }
        });
    Ok(futures_util::future::join_all(asks).await)
}

#[cfg(test)]
mod tests;
