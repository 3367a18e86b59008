//! The engine metrics scraper (Go Kthena `pkg/kthena-router/backend/*`).
//!
//! Every `METRICS_SCRAPE_INTERVAL` each endpoint's `GET /metrics` (Prometheus text, read by
//! `kthena-engine-metrics`) and `GET /v1/models` are read, at most
//! `metricsScrapeConcurrency` endpoints at a time. A failed or unparsable answer keeps the
//! last good values and marks them stale; it never writes zeros.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Limited};
use hyper_util::client::legacy::Client;
use kthena_api::networking::InferenceEngine;
use kthena_engine_metrics::{
    EngineMetricNames, EngineSample, SGLANG, VLLM, interval_mean_ms, parse_metrics, parse_models,
};
use tokio::time::Instant;

use crate::error::Error;
use crate::upstream::endpoint::{Endpoint, EngineState};

/// The HTTP client used for engines (upstream requests and scrapes).
pub(crate) type HttpClient = Client<kthena_memnet::Connector, crate::body::ReqBody>;

/// Largest scrape answer read, in bytes.
const MAX_SCRAPE_BYTES: usize = 16 * 1024 * 1024;

/// The metric names for an engine (`backend/{vllm,sglang}/metrics.go`).
#[must_use]
pub(crate) fn names_for(engine: InferenceEngine) -> EngineMetricNames {
    match engine {
        InferenceEngine::SgLang => SGLANG,
        InferenceEngine::VLlm => VLLM,
    }
}

// === impl EngineState ===

impl EngineState {
    /// Applies a good scrape: gauges overwritten, TTFT/TPOT updated only when the interval
    /// had observations (a zero mean keeps the previous value), staleness cleared.
    pub fn apply(&mut self, s: &EngineSample, now: Instant) {
        self.running = clamp_u32(s.running);
        self.waiting = clamp_u32(s.waiting);
        self.kv_cache_usage = if s.kv_cache_usage.is_finite() {
            s.kv_cache_usage.clamp(0.0, 1.0)
        } else {
            0.0
        };
        if let Some(h) = s.ttft {
            if let Some(ms) = interval_mean_ms(self.prev_ttft, h) {
                self.ttft_ms = Some(ms);
            }
            self.prev_ttft = Some(h);
        }
        if let Some(h) = s.tpot {
            if let Some(ms) = interval_mean_ms(self.prev_tpot, h) {
                self.tpot_ms = Some(ms);
            }
            self.prev_tpot = Some(h);
        }
        self.stale = false;
        self.scraped = true;
        self.consecutive_failures = 0;
        self.last_ok = Some(now);
    }

    /// Records a failed scrape: values kept, marked stale.
    pub fn fail(&mut self) {
        self.stale = true;
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
    }
}

fn clamp_u32(v: f64) -> u32 {
    if v.is_finite() && v > 0.0 {
        // Engine gauges are small counts; saturate on absurd values.
        if v >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            v as u32
        }
    } else {
        0
    }
}

/// `GET url` with a timeout; returns the status and body (at most 16 MiB).
///
/// # Errors
/// [`Error::ScrapeTransport`] (connect error, reset), [`Error::ScrapeBody`] (body cut or
/// over 16 MiB), [`Error::ScrapeTimeout`], [`Error::ScrapeUri`] (not a request target).
pub(crate) async fn http_get(
    client: &HttpClient,
    url: &str,
    timeout: Duration,
) -> Result<(http::StatusCode, Bytes), Error> {
    let req = http::Request::get(url)
        .body(crate::body::ReqBody::default())
        .map_err(|source| Error::ScrapeUri {
            url: url.to_owned(),
            source,
        })?;
    let fut = async {
        let resp = client
            .request(req)
            .await
            .map_err(|source| Error::ScrapeTransport {
                url: url.to_owned(),
                source,
            })?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_SCRAPE_BYTES)
            .collect()
            .await
            .map_err(|source| Error::ScrapeBody {
                url: url.to_owned(),
                source,
            })?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| Error::ScrapeTimeout {
            url: url.to_owned(),
            timeout,
        })?
}

/// `GET url` answered 2xx, or [`Error::ScrapeStatus`].
async fn get_ok(client: &HttpClient, url: String, timeout: Duration) -> Result<Bytes, Error> {
    let (status, body) = http_get(client, &url, timeout).await?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(Error::ScrapeStatus { url, status })
    }
}

/// Scrapes one endpoint once and updates its state.
pub(crate) async fn scrape_endpoint(
    client: &HttpClient,
    ep: &Endpoint,
    engine: InferenceEngine,
    timeout: Duration,
) {
    let base = ep.base_url();
    let metrics = async {
        let url = format!("{base}/metrics");
        let body = get_ok(client, url.clone(), timeout).await?;
        let text =
            std::str::from_utf8(&body).map_err(|source| Error::ScrapeNotUtf8 { url, source })?;
        Ok::<_, Error>(parse_metrics(text, names_for(engine))?)
    };
    let models = async {
        let body = get_ok(client, format!("{base}/v1/models"), timeout).await?;
        Ok::<_, Error>(parse_models(&body)?)
    };
    let (m, models) = futures_util::join!(metrics, models);
    let now = Instant::now();
    let mut st = ep.state();
    st.engine = Some(engine);
    match m {
        Ok(sample) => st.apply(&sample, now),
        Err(reason) => {
            st.fail();
            tracing::debug!(endpoint = %ep.name, %reason, "Engine metrics scrape failed; keeping last values as stale");
        }
    }
    match models {
        Ok(list) => {
            st.models = list.ids;
            st.lora_adapters = list.lora_adapters;
            st.models_known = true;
        }
        Err(reason) => {
            st.stale = true;
            tracing::debug!(endpoint = %ep.name, %reason, "Model list scrape failed; keeping the last list");
        }
    }
}

/// Scrapes every endpoint once with at most `concurrency` at a time.
pub(crate) async fn scrape_all(
    client: &HttpClient,
    endpoints: Vec<(Arc<Endpoint>, InferenceEngine)>,
    concurrency: usize,
    timeout: Duration,
) {
    futures_util::stream::iter(endpoints)
        .for_each_concurrent(concurrency.max(1), |(ep, engine)| async move {
            scrape_endpoint(client, &ep, engine, timeout).await;
        })
        .await;
}

#[cfg(test)]
mod tests;
