//! Metric collection from a target's entry pods (Go
//! `pkg/autoscaler/autoscaler/metric_collector.go`).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kthena_api::workload::MetricSource;
use kthena_autoscale::{InvalidSample, Metrics, PodHistograms};

use super::metrics::{FamilyValue, family};
use super::prometheus::QueryError;
use super::prometheus::access::{TlsClients, resolve};
use crate::serving::running_and_ready;

/// The HTTP client of the scrapes.
pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// What a round reads metrics with: pods and `http://` Prometheus servers over `http`,
/// `https://` ones over `tls`, the sources' Secrets and ConfigMaps with `kube`.
pub(crate) struct Clients {
    /// Plain HTTP.
    pub(crate) http: HttpClient,
    /// HTTPS clients by TLS settings.
    pub(crate) tls: TlsClients,
    /// The API client.
    pub(crate) kube: kube::Client,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").finish_non_exhaustive()
    }
}

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

/// Why a metric has no value this round, for the policy's status and events: a value that is
/// no sample, or a Prometheus query that failed. (A pod whose scrape fails leaves the metric
/// without a value too, as in Go, and is only logged.)
#[derive(Debug, thiserror::Error)]
pub(crate) enum Problem {
    /// A pod answered a well-formed value that is no sample.
    #[error("pod {pod} metric {metric}: value {} is {why}; sample skipped", shown(*.value))]
    PodValue {
        /// The policy's metric name.
        metric: String,
        /// `namespace/name` of the pod.
        pod: String,
        /// The value as read.
        value: f64,
        /// Why it is no sample.
        why: InvalidSample,
    },
    /// The Prometheus query of a metric gave no usable value.
    #[error("metric {metric} from Prometheus {server}: {error}")]
    Prometheus {
        /// The policy's metric name.
        metric: String,
        /// The source's `serverURL`.
        server: String,
        /// What went wrong (with its cause).
        #[source]
        error: QueryError,
    },
}

/// A metric value as Prometheus writes it: `NaN`, `+Inf`, `-Inf`, exponent notation from
/// 1e15 on (`1e300`, not 301 digits), else Rust's shortest form.
pub(crate) fn shown(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

impl Problem {
    /// A reference to the pod of a [`Problem::PodValue`].
    pub(crate) fn pod_ref(&self) -> Option<k8s_openapi::api::core::v1::ObjectReference> {
        let Self::PodValue { pod, .. } = self else {
            return None;
        };
        let (ns, name) = pod.split_once('/')?;
        Some(k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            namespace: Some(ns.to_owned()),
            name: Some(name.to_owned()),
            ..Default::default()
        })
    }

    /// Whether the problem is a value that is no sample (a Warning event each round).
    pub(crate) fn is_invalid_value(&self) -> bool {
        matches!(
            self,
            Self::PodValue { .. }
                | Self::Prometheus {
                    error: QueryError::Invalid(..),
                    ..
                }
        )
    }
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

/// Whether `pod` matches the source's `labelSelector` (`matchLabels` and
/// `matchExpressions`, [`matches`]); every pod without one.
fn selected(pod: &Pod, source: &MetricSource) -> bool {
    let Some(sel) = source.pod.as_ref().and_then(|p| p.label_selector.as_ref()) else {
        return true;
    };
    matches(
        sel,
        pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
    )
}

/// Whether `labels` match `sel` as Kubernetes label selectors define it
/// (apimachinery `LabelSelectorAsSelector`): every `matchLabels` pair, and every
/// requirement of `matchExpressions`: `In` (the label is set to one of `values`), `NotIn`
/// (unset or set to none of them), `Exists`, `DoesNotExist`. An unknown operator matches
/// nothing (validation refuses it).
pub(crate) fn matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs
        && sel.match_expressions.iter().flatten().all(|r| {
            let value = labels.get(&r.key);
            let listed = value.is_some_and(|v| r.values.iter().flatten().any(|x| x == v));
            match r.operator.as_str() {
                "In" => listed,
                "NotIn" => !listed,
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// GET `http://<ip>:<port><uri>`: the body of a 200 answer, else `None`.
pub(super) async fn scrape(client: &HttpClient, url: &str) -> Option<String> {
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

/// One pod-sourced metric of one round: where to scrape it and which family to read.
struct PodScrape<'a> {
    client: &'a HttpClient,
    /// The policy's metric name.
    metric: &'a str,
    /// The metric family in the exposition.
    fam: &'a str,
    port: i32,
    uri: &'a str,
}

/// What one pod gives for a metric.
enum PodValue {
    /// Not Running and Ready, or without an IP: counted as unready.
    Unready,
    /// Its value (a sum of series, or a P95 over the last minute).
    Value(f64),
    /// No value: the scrape failed, the family is missing, or the value is no sample.
    Missing,
}

impl PodScrape<'_> {
    /// Scrapes `pod` and reads the family; a value that is no sample is added to `problems`.
    async fn value(
        &self,
        histograms: &mut PodHistograms,
        now: Duration,
        pod: &Pod,
        problems: &mut Vec<Problem>,
    ) -> PodValue {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
        let (true, Some(ip)) = (running_and_ready(pod), ip) else {
            return PodValue::Unready;
        };
        let url = format!("http://{ip}:{}{}", self.port, self.uri);
        let value = match scrape(self.client, &url).await {
            Some(text) => family(&text, self.fam),
            None => None,
        };
        let name = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        match value {
            Some(FamilyValue::Scalar(v)) => PodValue::Value(v),
            Some(FamilyValue::Histogram(h)) => {
                let key = format!("{name}/{}", self.fam);
                match histograms.p95(now, &key, started_at(pod), h) {
                    Ok(v) => PodValue::Value(v),
                    Err(_) => PodValue::Missing,
                }
            }
            Some(FamilyValue::Invalid(value, why)) => {
                let p = Problem::PodValue {
                    metric: self.metric.to_owned(),
                    pod: name,
                    value,
                    why,
                };
                tracing::warn!(problem = %p, "Metric value is no sample");
                problems.push(p);
                PodValue::Missing
            }
            None => PodValue::Missing,
        }
    }
}

/// Collects every metric with a pod source from `pods` (the target's entry pods).
///
/// Per metric: the pods its selector picks; none, or any failed / deleted / restarted pod,
/// ⇒ the metric is unavailable this round. Unready pods are counted; every ready pod is
/// scraped and its value (sum of series, or P95 over the last minute for histograms) summed.
/// A non-200 answer, a timeout, unparsable text or a missing family on any ready pod makes
/// the metric unavailable (never a zero); so does a value that is no sample
/// (`kthena_autoscale::check_sample`: NaN, ±Inf, negative, above 1e15), which is also added
/// to `problems`, as is every failed Prometheus query (its Secrets and ConfigMaps are read
/// from `namespace`, the policy's).
pub(crate) async fn collect(
    clients: &Clients,
    namespace: &str,
    histograms: &mut PodHistograms,
    now: Duration,
    pods: &[Pod],
    sources: &BTreeMap<String, MetricSource>,
    problems: &mut Vec<Problem>,
) -> Collected {
    let mut out = Collected::default();
    for (metric, source) in sources {
        if let Some(prom) = &source.prometheus {
            let answer = match resolve(&clients.kube, namespace, prom).await {
                Ok(access) => {
                    super::prometheus::query(&clients.http, &clients.tls, prom, &access).await
                }
                Err(e) => Err(e.into()),
            };
            match answer {
                Ok(v) => {
                    out.external.insert(metric.clone(), v);
                }
                Err(error) => {
                    let p = Problem::Prometheus {
                        metric: metric.clone(),
                        server: prom.server_url.clone(),
                        error,
                    };
                    tracing::warn!(problem = %p, "Prometheus query gave no value this round");
                    problems.push(p);
                }
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
        let scrape = PodScrape {
            client: &clients.http,
            metric,
            fam: pod_source.name.as_deref().unwrap_or(metric),
            port: pod_source.port.unwrap_or(8100),
            uri: pod_source.uri.as_deref().unwrap_or("/metrics"),
        };
        let mut ok = true;
        let (mut sum, mut unready) = (0.0, 0);
        for pod in &group {
            match scrape.value(histograms, now, pod, problems).await {
                PodValue::Unready => unready += 1,
                PodValue::Value(v) => sum += v,
                PodValue::Missing => ok = false,
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
mod tests;
