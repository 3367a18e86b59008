//! Metric collection from a target's entry pods (Go `metric_collector.go`, spec §6.2).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::core::v1::Pod;
use kthena_api::workload::MetricSource;
use kthena_autoscale::{Metrics, PodHistograms};

use super::metrics::{FamilyValue, family};
use crate::observed::running_and_ready;

/// The HTTP client of the scrapes.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Per-scrape timeout (Go: 3 s).
pub(crate) const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);
const MAX_SCRAPE_BYTES: usize = 16 * 1024 * 1024;

/// What one round collected for a target.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// Pods that are neither failed nor Running and Ready.
    pub(crate) unready: i32,
    /// Pod metrics summed over the ready pods; a metric is absent when its group was
    /// unavailable this round.
    pub(crate) ready: Metrics,
    /// Values of the metrics with a `prometheus` source that answered this round.
    pub(crate) external: Metrics,
}

/// Why a pod group gives no value this round.
fn unusable(pod: &Pod) -> bool {
    let failed = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
    let restarted = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.restart_count > 0));
    failed || restarted || pod.metadata.deletion_timestamp.is_some()
}

/// Whether `pod` carries every label of the source's `labelSelector.matchLabels`.
fn selected(pod: &Pod, source: &MetricSource) -> bool {
    let Some(sel) = source.pod.as_ref().and_then(|p| p.label_selector.as_ref()) else {
        return true;
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    sel.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// GET `http://<ip>:<port><uri>`: the body of a 200 answer, else `None`.
async fn scrape(client: &HttpClient, url: &str) -> Option<String> {
    let fut = async {
        let req = http::Request::get(url).body(Full::new(Bytes::new())).ok()?;
        let resp = client.request(req).await.ok()?;
        if resp.status() != http::StatusCode::OK {
            return None;
        }
        let body = Limited::new(resp.into_body(), MAX_SCRAPE_BYTES)
            .collect()
            .await
            .ok()?
            .to_bytes();
        String::from_utf8(body.to_vec()).ok()
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, fut)
        .await
        .ok()
        .flatten()
}

fn started_at(pod: &Pod) -> Option<Duration> {
    let t = pod.status.as_ref()?.start_time.as_ref()?;
    Some(Duration::from_secs(u64::try_from(t.0.as_second()).ok()?))
}

/// Collects every metric with a pod source from `pods` (the target's entry pods).
///
/// Per metric: the pods its selector picks; none, or any failed / deleted / restarted pod,
/// ⇒ the metric is unavailable this round. Unready pods are counted; every ready pod is
/// scraped and its value (sum of series, or P95 over the last minute for histograms) summed.
/// A non-200 answer, a timeout, unparsable text or a missing family on any ready pod makes
/// the metric unavailable (never a zero).
pub(crate) async fn collect(
    client: &HttpClient,
    histograms: &mut PodHistograms,
    now: Duration,
    pods: &[Pod],
    sources: &BTreeMap<String, MetricSource>,
) -> Collected {
    let mut out = Collected::default();
    for (metric, source) in sources {
        if let Some(prom) = &source.prometheus {
            match super::prometheus::query(client, prom).await {
                Some(v) => {
                    out.external.insert(metric.clone(), v);
                }
                None => tracing::info!(%metric, "Prometheus query gave no value this round"),
            }
            continue;
        }
        let Some(pod_source) = &source.pod else {
            continue;
        };
        let group: Vec<&Pod> = pods.iter().filter(|p| selected(p, source)).collect();
        if group.is_empty() || group.iter().any(|p| unusable(p)) {
            tracing::info!(%metric, pods = group.len(), "Metric group unavailable this round");
            continue;
        }
        let fam = pod_source.name.as_deref().unwrap_or(metric);
        let port = pod_source.port.unwrap_or(8100);
        let uri = pod_source.uri.as_deref().unwrap_or("/metrics");
        let (mut sum, mut unready, mut ok) = (0.0, 0, true);
        for pod in &group {
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
            let (true, Some(ip)) = (running_and_ready(pod), ip) else {
                unready += 1;
                continue;
            };
            let value = match scrape(client, &format!("http://{ip}:{port}{uri}")).await {
                Some(text) => family(&text, fam),
                None => None,
            };
            let key = format!(
                "{}/{}/{fam}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            match value {
                Some(FamilyValue::Scalar(v)) => sum += v,
                Some(FamilyValue::Histogram(h)) => {
                    match histograms.p95(now, &key, started_at(pod), h) {
                        Ok(v) => sum += v,
                        Err(_) => ok = false,
                    }
                }
                None => ok = false,
            }
        }
        if !ok {
            tracing::info!(%metric, "A ready pod gave no value; no decision on this metric this round");
            continue;
        }
        out.unready = out.unready.max(unready);
        if group.iter().any(|p| running_and_ready(p)) {
            out.ready.insert(metric.clone(), sum);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kthena_api::workload::PodMetricSource;

    use super::*;

    fn pod(phase: &str, restarts: i32) -> Pod {
        let mut p = Pod::default();
        p.metadata.labels = Some([("tier".to_owned(), "gpu".to_owned())].into());
        p.status = Some(PodStatus {
            phase: Some(phase.to_owned()),
            container_statuses: Some(vec![ContainerStatus {
                restart_count: restarts,
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        p
    }

    #[test]
    fn failed_restarted_or_deleted_pods_make_the_group_unusable() {
        assert!(!unusable(&pod("Running", 0)));
        assert!(!unusable(&pod("Pending", 0)));
        assert!(unusable(&pod("Failed", 0)));
        // Any restart, even of a pod that is Running and Ready again (Go, spec §11 item 12).
        assert!(unusable(&pod("Running", 1)));
        let mut deleted = pod("Running", 0);
        deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(unusable(&deleted));
    }

    #[test]
    fn pod_sources_select_by_match_labels() {
        let source = |labels: &[(&str, &str)]| MetricSource {
            pod: Some(PodMetricSource {
                label_selector: Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                        match_labels: Some(
                            labels
                                .iter()
                                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                                .collect(),
                        ),
                        ..Default::default()
                    },
                ),
                ..PodMetricSource::default()
            }),
            prometheus: None,
        };
        let p = pod("Running", 0);
        assert!(selected(&p, &MetricSource::default()));
        assert!(selected(&p, &source(&[("tier", "gpu")])));
        assert!(!selected(&p, &source(&[("tier", "cpu")])));
        assert!(!selected(&p, &source(&[("tier", "gpu"), ("zone", "a")])));
    }
}
