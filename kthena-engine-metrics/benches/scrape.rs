//! The engine-metrics scrape parse: one `/metrics` answer turned into the scheduler's sample
//! (`parse_metrics`), as the router does for every endpoint every scrape interval.
//!
//! Inputs: a real vLLM 0.32 answer (`tests/data/vllm-0.32-metrics.txt`, 661 lines) and a real
//! llama.cpp answer (`tests/data/llamacpp-metrics.txt`). Two contenders in the same run:
//! * `before`: the parse before it passed only the lines it reads (every line escaped and parsed,
//!   the families looked up by name), kept here verbatim as the baseline;
//! * `whole`: `prometheus-parse` alone on every line (the parser's share of `before`);
//! * `kept`: [`kthena_engine_metrics::parse_metrics`] as the router runs it.
//!
//! Criterion reports time per answer.
//! Run with `cargo bench -p kthena-engine-metrics --bench scrape -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any setup error")]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kthena_engine_metrics::{LLAMACPP_PREFIX, VLLM, parse_metrics};

/// The parse of kthena-router before it passed only the lines it reads, kept here verbatim
/// as the baseline.
mod before {
    use kthena_engine_metrics::{EngineMetricNames, EngineSample, llamacpp_sample};
    use prometheus_parse::{Scrape, Value};

    /// Parses a Prometheus text answer.
    ///
    /// # Errors
    /// A reason when the text holds no sample at all (not a Prometheus answer).
    pub(crate) fn parse_metrics(
        text: &str,
        names: EngineMetricNames,
    ) -> Result<EngineSample, String> {
        // prometheus-parse 0.2 matches metric names with `\w+`, which excludes the `:` of
        // `vllm:*` and `sglang:*` names; colons in the name token are swapped for a marker
        // before parsing and restored in the lookups below.
        let scrape = Scrape::parse(text.lines().map(|l| Ok(escape_name_colons(l))))
            .map_err(|e| format!("unparsable metrics: {e}"))?;
        if scrape.samples.is_empty() {
            return Err("unparsable metrics: no sample found".into());
        }
        if let Some(s) = llamacpp_sample(&scrape, COLON_MARK) {
            return Ok(s);
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
        Ok(EngineSample {
            running: last(names.running).unwrap_or(0.0),
            waiting: last(names.waiting).unwrap_or(0.0),
            kv_cache_usage: last(names.kv_cache_usage).unwrap_or(0.0),
            ttft: hist(names.ttft),
            tpot: hist(names.tpot),
        })
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
}

const VLLM_ANSWER: &str = include_str!("../tests/data/vllm-0.32-metrics.txt");
const LLAMACPP_ANSWER: &str = include_str!("../tests/data/llamacpp-metrics.txt");

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse_metrics");
    for (name, text) in [("vllm-0.32", VLLM_ANSWER), ("llamacpp", LLAMACPP_ANSWER)] {
        assert!(name != "llamacpp" || text.contains(LLAMACPP_PREFIX));
        g.throughput(Throughput::Bytes(text.len() as u64));
        assert_eq!(
            before::parse_metrics(text, VLLM).unwrap(),
            parse_metrics(text, VLLM).unwrap()
        );
        g.bench_function(format!("before/{name}"), |b| {
            b.iter(|| before::parse_metrics(black_box(text), VLLM).unwrap());
        });
        g.bench_function(format!("whole/{name}"), |b| {
            b.iter(|| {
                let lines = black_box(text).lines().map(|l| Ok(l.to_owned()));
                prometheus_parse::Scrape::parse(lines).unwrap()
            });
        });
        g.bench_function(format!("kept/{name}"), |b| {
            b.iter(|| parse_metrics(black_box(text), VLLM).unwrap());
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
