//! llama.cpp `llama-server` metrics (`--metrics`): the `llamacpp:*` families mapped onto the
//! scheduler's signals.
//!
//! | signal | llama.cpp source | notes |
//! |---|---|---|
//! | running | `llamacpp:requests_processing` | slots busy with a request |
//! | waiting | `llamacpp:requests_deferred` | requests queued for a free slot |
//! | KV-cache usage | `llamacpp:kv_cache_usage_ratio` when present | removed from recent llama.cpp builds: then **unknown** and reported as 0 |
//! | TPOT | Δ`llamacpp:tokens_predicted_seconds_total` / Δ`llamacpp:tokens_predicted_total` | the same interval mean the router computes from vLLM's histogram |
//! | TTFT | none | **unknown**: llama.cpp exports no per-request first-token time, only `llamacpp:prompt_seconds_total` per prompt token (prefill speed), which excludes queueing |
//!
//! Prefix-cache hits are visible as `llamacpp:prompt_tokens_cached_total` (tokens served from
//! a slot's cache) but llama.cpp publishes no KV events, so `kvcache-aware` has nothing to
//! index: route llama.cpp with `prefix-cache` (the router's own record of where prompts went).

use prometheus_parse::{Scrape, Value};

use super::EngineSample;

/// The metric name prefix of llama.cpp.
pub const LLAMACPP_PREFIX: &str = "llamacpp:";

/// The sample of a llama.cpp answer, or `None` when `scrape` holds no `llamacpp:*` family.
/// `mark` is the stand-in the scraper uses for `:` in metric names while parsing.
#[must_use]
pub fn llamacpp_sample(scrape: &Scrape, mark: &str) -> Option<EngineSample> {
    let prefix = LLAMACPP_PREFIX.replace(':', mark);
    if !scrape.samples.iter().any(|s| s.metric.starts_with(&prefix)) {
        return None;
    }
    let last = |name: &str| -> Option<f64> {
        let name = name.replace(':', mark);
        scrape
            .samples
            .iter()
            .rev()
            .find(|s| s.metric == name)
            .map(|s| match s.value {
                Value::Gauge(v) | Value::Untyped(v) | Value::Counter(v) => v,
                _ => 0.0,
            })
    };
    let tpot = match (
        last("llamacpp:tokens_predicted_seconds_total"),
        last("llamacpp:tokens_predicted_total"),
    ) {
        (Some(secs), Some(tokens)) => Some((secs, tokens)),
        _ => None,
    };
    Some(EngineSample {
        running: last("llamacpp:requests_processing").unwrap_or(0.0),
        waiting: last("llamacpp:requests_deferred").unwrap_or(0.0),
        kv_cache_usage: last("llamacpp:kv_cache_usage_ratio").unwrap_or(0.0),
        ttft: None,
        tpot,
    })
}

#[cfg(test)]
mod tests;
