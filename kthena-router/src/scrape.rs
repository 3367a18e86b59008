//! The engine metrics scraper (Go Kthena `pkg/kthena-router/backend/*`).
//!
//! Every `METRICS_SCRAPE_INTERVAL` each endpoint's `GET /metrics` (Prometheus text, parsed
//! with `prometheus-parse`) and `GET /v1/models` are read, at most
//! `metricsScrapeConcurrency` endpoints at a time. A failed or unparsable answer keeps the
//! last good values and marks them stale; it never writes zeros.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use kthena_api::networking::InferenceEngine;
use prometheus_parse::{Scrape, Value};
use tokio::time::Instant;

use crate::error::Error;
use crate::upstream::endpoint::{Endpoint, EngineState};

pub(crate) mod llamacpp;

/// The HTTP client used for engines (upstream requests and scrapes).
pub type HttpClient = Client<kthena_memnet::Connector, Full<Bytes>>;

/// Largest scrape answer read, in bytes.
const MAX_SCRAPE_BYTES: usize = 16 * 1024 * 1024;

/// Metric family names of one engine (`backend/{vllm,sglang}/metrics.go`).
#[derive(Debug, Clone, Copy)]
pub struct EngineMetricNames {
    /// KV-cache usage gauge (ratio 0..1).
    pub kv_cache_usage: &'static str,
    /// Waiting requests gauge.
    pub waiting: &'static str,
    /// Running requests gauge.
    pub running: &'static str,
    /// Time-per-output-token histogram (seconds).
    pub tpot: &'static str,
    /// Time-to-first-token histogram (seconds).
    pub ttft: &'static str,
}

/// vLLM names (not the deprecated `vllm:gpu_cache_usage_perc`).
pub const VLLM: EngineMetricNames = EngineMetricNames {
    kv_cache_usage: "vllm:kv_cache_usage_perc",
    waiting: "vllm:num_requests_waiting",
    running: "vllm:num_requests_running",
    tpot: "vllm:inter_token_latency_seconds",
    ttft: "vllm:time_to_first_token_seconds",
};

/// SGLang names.
pub const SGLANG: EngineMetricNames = EngineMetricNames {
    kv_cache_usage: "sglang:token_usage",
    waiting: "sglang:num_queue_reqs",
    running: "sglang:num_running_reqs",
    tpot: "sglang:inter_token_latency_seconds",
    ttft: "sglang:time_to_first_token_seconds",
};

/// The names for an engine.
#[must_use]
pub fn names_for(engine: InferenceEngine) -> EngineMetricNames {
    match engine {
        InferenceEngine::SgLang => SGLANG,
        InferenceEngine::VLlm => VLLM,
    }
}

/// One scrape's raw values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineSample {
    /// Running requests (last series of the family; 0 when missing).
    pub running: f64,
    /// Waiting requests (last series; 0 when missing).
    pub waiting: f64,
    /// KV-cache usage ratio (last series; 0 when missing).
    pub kv_cache_usage: f64,
    /// `(sum seconds, count)` of the TTFT histogram, last series.
    pub ttft: Option<(f64, f64)>,
    /// `(sum seconds, count)` of the TPOT histogram, last series.
    pub tpot: Option<(f64, f64)>,
}

/// Parses a Prometheus text answer.
///
/// # Errors
/// [`Error::MetricsSyntax`] when the text is not Prometheus text, [`Error::NoMetricSample`]
/// when it holds no sample at all.
pub fn parse_metrics(text: &str, names: EngineMetricNames) -> Result<EngineSample, Error> {
    // prometheus-parse 0.2 matches metric names with `\w+`, which excludes the `:` of
    // `vllm:*` and `sglang:*` names; colons in the name token are swapped for a marker
    // before parsing and restored in the lookups below.
    //
    // Only the lines the sample reads go through the parser: a vLLM answer has ~660 lines
    // of which ~10 are read, and the parser runs a regex per line. An answer where no line
    // is kept is parsed whole, so "no sample found" means what it meant before.
    let kept = parse_lines(text.lines().filter(|l| names.keeps(l)))?;
    let scrape = if kept.samples.is_empty() {
        parse_lines(text.lines())?
    } else {
        kept
    };
    if scrape.samples.is_empty() {
        return Err(Error::NoMetricSample);
    }
    Ok(sample_of(&scrape, names))
}

/// The sample of a parsed answer (llama.cpp's families when present, else `names`).
fn sample_of(scrape: &Scrape, names: EngineMetricNames) -> EngineSample {
    if let Some(s) = llamacpp::llamacpp_sample(scrape, COLON_MARK) {
        return s;
    }
    let last = |name: &str| -> Option<f64> {
        let name = name.replace(':', COLON_MARK);
        scrape
            .samples
            .iter()
            .rev()
            .find(|s| s.metric == name)
            .map(|s| match s.value {
                Value::Gauge(v) | Value::Untyped(v) => v,
                _ => 0.0,
            })
    };
    let hist = |name: &str| -> Option<(f64, f64)> {
        Some((
            last(&format!("{name}_sum"))?,
            last(&format!("{name}_count"))?,
        ))
    };
    EngineSample {
        running: last(names.running).unwrap_or(0.0),
        waiting: last(names.waiting).unwrap_or(0.0),
        kv_cache_usage: last(names.kv_cache_usage).unwrap_or(0.0),
        ttft: hist(names.ttft),
        tpot: hist(names.tpot),
    }
}

/// `lines` parsed with their metric names' colons escaped.
fn parse_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Result<Scrape, Error> {
    Scrape::parse(lines.map(|l| Ok(escape_name_colons(l)))).map_err(Error::MetricsSyntax)
}

impl EngineMetricNames {
    /// Whether a line of a Prometheus answer can matter to [`parse_metrics`]: a sample or
    /// `# TYPE` line of one of these gauges, a `_sum`/`_count` sample of one of these
    /// histograms, or any `llamacpp:*` line. Buckets, `# HELP` and other families are not.
    fn keeps(&self, line: &str) -> bool {
        let t = line.trim_start();
        let name = match t.strip_prefix('#') {
            Some(rest) => match rest.trim_start().strip_prefix("TYPE") {
                Some(after) => after.split_whitespace().next().unwrap_or(""),
                None => return false,
            },
            None => t.split(['{', ' ', '\t']).next().unwrap_or(""),
        };
        let histogram = |base: &str| {
            name.strip_prefix(base)
                .is_some_and(|rest| rest == "_sum" || rest == "_count")
        };
        name == self.running
            || name == self.waiting
            || name == self.kv_cache_usage
            || histogram(self.ttft)
            || histogram(self.tpot)
            || name.starts_with(llamacpp::LLAMACPP_PREFIX)
    }
}

/// Stands for `:` inside metric names while parsing (a string no metric name contains).
const COLON_MARK: &str = "__kthena_colon__";

/// Replaces `:` in the metric-name token of a sample, `# HELP` or `# TYPE` line.
fn escape_name_colons(line: &str) -> String {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('#') {
        let rest = rest.trim_start();
        for kw in ["HELP", "TYPE"] {
            if let Some(after) = rest.strip_prefix(kw) {
                let after = after.trim_start();
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                return format!(
                    "# {kw} {}{}",
                    after[..end].replace(':', COLON_MARK),
                    &after[end..]
                );
            }
        }
        return line.to_owned();
    }
    let end = t
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(t.len());
    format!("{}{}", t[..end].replace(':', COLON_MARK), &t[end..])
}

/// Mean of a histogram over the interval between two scrapes, in ms (Go Kthena):
/// `(sum_now − sum_prev)/(count_now − count_prev)`; no previous scrape or no new
/// observation gives `None`; a counter reset (engine restart) gives `sum_now/count_now`.
#[must_use]
pub fn interval_mean_ms(prev: Option<(f64, f64)>, now: (f64, f64)) -> Option<f64> {
    let (sum, count) = now;
    let (psum, pcount) = prev?;
    let mean = if count < pcount || sum < psum {
        if count > 0.0 {
            sum / count
        } else {
            return None;
        }
    } else if count > pcount {
        (sum - psum) / (count - pcount)
    } else {
        return None;
    };
    (mean.is_finite() && mean > 0.0).then_some(mean * 1000.0)
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

/// An engine's `GET /v1/models` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelList {
    /// Every `data[].id`, in order.
    pub ids: Vec<String>,
    /// The LoRA adapters: ids whose card has a non-null `parent` (vLLM lists adapters with
    /// `parent` = the base model id); when no card has a `parent` key at all, every id after
    /// the first (Go Kthena's reading).
    pub lora_adapters: Vec<String>,
}

/// Parses `GET /v1/models`.
///
/// # Errors
/// [`Error::ModelsJson`] when the body is not JSON, [`Error::ModelsShape`] when it has no
/// `data` list (`{"data":[{"id":..}]}`).
pub fn parse_models(body: &[u8]) -> Result<ModelList, Error> {
    let v: serde_json::Value = serde_json::from_slice(body).map_err(Error::ModelsJson)?;
    let data = v
        .get("data")
        .and_then(|d| d.as_array())
        .ok_or(Error::ModelsShape)?;
    let cards: Vec<(String, Option<bool>)> = data
        .iter()
        .filter_map(|m| {
            let id = m.get("id").and_then(|i| i.as_str())?.to_owned();
            let child = m.get("parent").map(|p| !p.is_null());
            Some((id, child))
        })
        .collect();
    let any_parent_key = cards.iter().any(|(_, c)| c.is_some());
    let lora_adapters = cards
        .iter()
        .enumerate()
        .filter(|(i, (_, child))| {
            if any_parent_key {
                *child == Some(true)
            } else {
                *i > 0
            }
        })
        .map(|(_, (id, _))| id.clone())
        .collect();
    Ok(ModelList {
        ids: cards.into_iter().map(|(id, _)| id).collect(),
        lora_adapters,
    })
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
        .body(Full::new(Bytes::new()))
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
pub async fn scrape_endpoint(
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
        parse_metrics(text, names_for(engine))
    };
    let models = async {
        let body = get_ok(client, format!("{base}/v1/models"), timeout).await?;
        parse_models(&body)
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
        }
        Err(reason) => {
            st.stale = true;
            tracing::debug!(endpoint = %ep.name, %reason, "Model list scrape failed; keeping the last list");
        }
    }
}

/// Scrapes every endpoint once with at most `concurrency` at a time.
pub async fn scrape_all(
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
mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("../tests/data/vllm-0.32-metrics.txt");

    #[test]
    fn parses_real_vllm_output() {
        let s = parse_metrics(SAMPLE, VLLM).unwrap();
        assert_eq!(s.running, 0.0);
        assert_eq!(s.waiting, 0.0);
        assert_eq!(s.kv_cache_usage, 0.0);
        assert_eq!(s.ttft, Some((0.21722936630249023, 7.0)));
        assert_eq!(s.tpot, Some((0.2923087659992234, 26.0)));
        // The SGLang names are absent from a vLLM answer: zeros, no histograms.
        let s = parse_metrics(SAMPLE, SGLANG).unwrap();
        assert_eq!(s, EngineSample::default());
    }

    #[test]
    fn the_kept_lines_give_the_sample_of_the_whole_answer() {
        let busy = SAMPLE
            .replace(
                "vllm:num_requests_running{engine=\"0\",model_name=\"tiny-qwen3\"} 0.0",
                "vllm:num_requests_running{engine=\"0\",model_name=\"tiny-qwen3\"} 3.0\n\
                 vllm:num_requests_running{engine=\"1\",model_name=\"tiny-qwen3\"} 4.0",
            )
            .replace(
                "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny-qwen3\"} 0.0",
                "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny-qwen3\"} 0.25",
            );
        let llamacpp = include_str!("../tests/data/llamacpp-metrics.txt");
        for text in [SAMPLE, busy.as_str(), llamacpp] {
            for names in [VLLM, SGLANG] {
                let whole = sample_of(&parse_lines(text.lines()).unwrap(), names);
                assert_eq!(parse_metrics(text, names).unwrap(), whole);
            }
        }
        let s = parse_metrics(&busy, VLLM).unwrap();
        assert_eq!(
            (s.running, s.kv_cache_usage),
            (4.0, 0.25),
            "the last series"
        );
        // Of the 661 lines of the vLLM answer, the gauges with their TYPE lines and the
        // histograms' _sum and _count go through the parser.
        assert_eq!(SAMPLE.lines().count(), 661);
        assert_eq!(SAMPLE.lines().filter(|l| VLLM.keeps(l)).count(), 10);
        // An answer without any of the families is still an answer (zeros), text without a
        // sample still is not.
        let other = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n";
        assert_eq!(parse_metrics(other, VLLM).unwrap(), EngineSample::default());
    }

    #[test]
    fn parses_sglang_names() {
        let text = "# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"q\"} 0.42\n\
                    sglang:num_queue_reqs{model_name=\"q\"} 3\nsglang:num_running_reqs{model_name=\"q\"} 7\n\
                    sglang:time_to_first_token_seconds_sum 2.5\nsglang:time_to_first_token_seconds_count 5\n\
                    sglang:inter_token_latency_seconds_sum 0.5\nsglang:inter_token_latency_seconds_count 50\n";
        let s = parse_metrics(text, SGLANG).unwrap();
        assert_eq!(s.kv_cache_usage, 0.42);
        assert_eq!((s.waiting, s.running), (3.0, 7.0));
        assert_eq!(s.ttft, Some((2.5, 5.0)));
        assert_eq!(s.tpot, Some((0.5, 50.0)));
        assert_eq!(
            names_for(InferenceEngine::SgLang).waiting,
            "sglang:num_queue_reqs"
        );
    }

    #[test]
    fn histogram_deltas() {
        assert_eq!(interval_mean_ms(None, (1.0, 10.0)), None);
        assert_eq!(interval_mean_ms(Some((1.0, 10.0)), (1.0, 10.0)), None);
        assert_eq!(
            interval_mean_ms(Some((1.0, 10.0)), (1.5, 12.0)),
            Some(250.0)
        );
        // restart: counters went down
        assert_eq!(interval_mean_ms(Some((5.0, 50.0)), (0.2, 2.0)), Some(100.0));
    }

    #[test]
    fn state_keeps_values_on_failure() {
        let mut st = EngineState::default();
        let now = Instant::now();
        let text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 3\nvllm:num_requests_waiting{engine=\"1\"} 4\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.25\nvllm:time_to_first_token_seconds_sum 1.0\nvllm:time_to_first_token_seconds_count 10\n";
        st.apply(&parse_metrics(text, VLLM).unwrap(), now);
        assert_eq!((st.waiting, st.running, st.kv_cache_usage), (4, 2, 0.25));
        assert_eq!(st.ttft_ms, None);
        let text2 = text
            .replace("_sum 1.0", "_sum 1.2")
            .replace("_count 10", "_count 12");
        st.apply(&parse_metrics(&text2, VLLM).unwrap(), now);
        let ttft = st.ttft_ms.unwrap();
        assert!((ttft - 100.0).abs() < 1e-9, "{ttft}");
        let e = parse_metrics("<html>oops</html>", VLLM).unwrap_err();
        assert!(matches!(e, Error::NoMetricSample), "{e:?}");
        assert_eq!(e.to_string(), "unparsable metrics: no sample found");
        st.fail();
        assert!(st.stale);
        assert_eq!((st.waiting, st.running, st.kv_cache_usage), (4, 2, 0.25));
        assert!((st.ttft_ms.unwrap() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn models_list() {
        let body = include_bytes!("../tests/data/vllm-0.32-models.json");
        let list = parse_models(body).unwrap();
        assert_eq!(list.ids, vec!["tiny-qwen3".to_owned()]);
        assert!(list.lora_adapters.is_empty());
        let e = parse_models(b"{}").unwrap_err();
        assert!(matches!(e, Error::ModelsShape), "{e:?}");
        assert_eq!(e.to_string(), "invalid /v1/models: no data list");
        let e = parse_models(b"<html>").unwrap_err();
        assert!(matches!(e, Error::ModelsJson(_)), "{e:?}");
        assert!(e.to_string().starts_with("invalid /v1/models: "), "{e}");
        // vLLM with an adapter: the card's `parent` names the base model.
        let with_lora =
            br#"{"data":[{"id":"lora-sql","parent":"base"},{"id":"base","parent":null}]}"#;
        let list = parse_models(with_lora).unwrap();
        assert_eq!(list.ids, vec!["lora-sql".to_owned(), "base".to_owned()]);
        assert_eq!(list.lora_adapters, vec!["lora-sql".to_owned()]);
        // No `parent` key anywhere: the ids after the first are adapters.
        let plain = br#"{"data":[{"id":"base"},{"id":"a1"}]}"#;
        assert_eq!(
            parse_models(plain).unwrap().lora_adapters,
            vec!["a1".to_owned()]
        );
    }

    /// A scrape's failures are typed and name the URL: an error status, a refused
    /// connection, and an engine that does not answer within the timeout.
    #[tokio::test]
    async fn scrape_failures_name_the_url() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut server = tokio::task::JoinSet::new();
        server.spawn(async move {
            let mut n = 0;
            let mut held = Vec::new();
            while let Ok((mut s, _)) = l.accept().await {
                n += 1;
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                if n == 1 {
                    let _ = s
                        .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                        .await;
                } else {
                    // Never answers: the scrape times out.
                    held.push(s);
                }
            }
        });
        let client = crate::server::http_client();
        let url = format!("http://{addr}/metrics");
        let e = get_ok(&client, url.clone(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::ScrapeStatus { status, .. } if status.as_u16() == 503),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!("GET {url} answered 503 Service Unavailable")
        );
        let e = get_ok(
            &client,
            format!("http://{addr}/v1/models"),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("GET http://{addr}/v1/models: timed out after 200ms")
        );
        // A port nothing listens on: the connect error, not hyper's "client error (Connect)".
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = get_ok(
            &client,
            format!("http://{free}/metrics"),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, Error::ScrapeTransport { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("GET http://{free}/metrics: ")),
            "{msg}"
        );
        assert!(msg.contains("Connection refused"), "{msg}");
    }
}
