//! Engine `/metrics` answers read into scheduling samples (Go Kthena
//! `pkg/kthena-router/backend/*`).
//!
//! The answer is Prometheus text, parsed with `prometheus-parse`. Only the families the sample
//! reads go through the parser; llama.cpp's `llamacpp:*` families are mapped by
//! [`llamacpp`].

use prometheus_parse::{Scrape, Value};

use crate::error::{Error, Result};
use llamacpp::{LLAMACPP_PREFIX, llamacpp_sample};

pub(crate) mod llamacpp;

/// Metric family names of one engine (Go Kthena `pkg/kthena-router/backend/{vllm,sglang}/metrics.go`).
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
pub fn parse_metrics(text: &str, names: EngineMetricNames) -> Result<EngineSample> {
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
    if let Some(s) = llamacpp_sample(scrape, COLON_MARK) {
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
fn parse_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Result<Scrape> {
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
            || name.starts_with(LLAMACPP_PREFIX)
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

#[cfg(test)]
mod tests;
