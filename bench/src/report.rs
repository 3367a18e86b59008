//! Per-policy results, their aggregation from per-request samples, and the markdown table.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// What the client saw of one request. Times are model seconds (wall × time scale).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Whether the request finished with status 200 and a complete stream.
    pub ok: bool,
    /// Time to the first generated token.
    pub ttft_s: f64,
    /// Time to the last byte of the answer.
    pub e2e_s: f64,
    /// Generated tokens received.
    pub output_tokens: usize,
}

/// Counters read from one engine's `/metrics` after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EngineCounters {
    /// `vllm:request_success_total` (all finish reasons).
    pub requests: u64,
    /// `vllm:prefix_cache_queries_total` (prompt tokens looked up).
    pub prefix_queries: u64,
    /// `vllm:prefix_cache_hits_total` (prompt tokens found cached).
    pub prefix_hits: u64,
    /// `vllm:num_preemptions_total`.
    pub preemptions: u64,
}

impl EngineCounters {
    /// Parses the counters from a Prometheus text exposition (series summed over labels;
    /// missing series count 0).
    #[must_use]
    pub fn from_metrics_text(text: &str) -> Self {
        let mut c = Self::default();
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            let Ok(v) = value.trim().parse::<f64>() else {
                continue;
            };
            // Counters are whole numbers; the cast saturates for absurd values.
            let v = v.max(0.0).round() as u64;
            match name {
                "vllm:request_success_total" => c.requests += v,
                "vllm:prefix_cache_queries_total" => c.prefix_queries += v,
                "vllm:prefix_cache_hits_total" => c.prefix_hits += v,
                "vllm:num_preemptions_total" => c.preemptions += v,
                _ => {}
            }
        }
        c
    }
}

/// One row of the report: a policy in a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyResult {
    /// Scenario name (`long`, `short`, ...).
    pub scenario: String,
    /// Policy name (`random`, `least-request+kvcache-aware`, `direct`, ...).
    pub policy: String,
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed (non-200 or broken stream).
    pub failed: usize,
    /// Model seconds from the first send to the last completion.
    pub duration_s: f64,
    /// Successful requests per model second.
    pub throughput_rps: f64,
    /// Generated tokens per model second.
    pub output_tps: f64,
    /// Mean time to first token, model seconds (successful requests).
    pub ttft_mean_s: f64,
    /// Median time to first token.
    pub ttft_p50_s: f64,
    /// 99th percentile time to first token.
    pub ttft_p99_s: f64,
    /// Mean end-to-end latency.
    pub e2e_mean_s: f64,
    /// 99th percentile end-to-end latency.
    pub e2e_p99_s: f64,
    /// Prompt tokens served from the engines' prefix caches / prompt tokens looked up.
    pub cache_hit_rate: f64,
    /// Requests each engine finished (engine order), from its metrics.
    pub requests_per_engine: Vec<u64>,
    /// Preemptions over all engines.
    pub preemptions: u64,
    /// Throughput / random's throughput in the same run (when random ran).
    pub throughput_vs_random: Option<f64>,
    /// Mean TTFT / random's mean TTFT in the same run (when random ran).
    pub ttft_vs_random: Option<f64>,
    /// `virtual` (one simulated clock, in-memory connections) or `real` (wall clock, TCP).
    #[serde(default = "real_clock")]
    pub clock: String,
    /// The seeds' spread when the row is the median of several runs (`None`: one run).
    #[serde(default)]
    pub spread: Option<Spread>,
    /// Whether the throughput spread is clear of random's (a real difference); `None`
    /// without spreads to compare.
    #[serde(default)]
    pub throughput_differs: Option<bool>,
    /// Whether the mean-TTFT spread is clear of random's.
    #[serde(default)]
    pub ttft_differs: Option<bool>,
    /// Share (0..=1) of the requests sent that were answered in full with a TTFT at or
    /// below the scenario's objective ([`PolicyResult::with_slo`]); `None`: no objective.
    #[serde(default)]
    pub within_slo: Option<f64>,
}

fn real_clock() -> String {
    "real".to_owned()
}

/// The range of a row's headline numbers over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The seeds run (workload text and order, arrivals, the router's random draws).
    pub seeds: Vec<u64>,
    /// Lowest and highest throughput, requests per model second.
    pub throughput_rps: [f64; 2],
    /// Lowest and highest mean TTFT, model seconds.
    pub ttft_mean_s: [f64; 2],
}

impl Spread {
    /// Whether two `[min, max]` ranges share a point.
    #[must_use]
    pub fn overlap(a: [f64; 2], b: [f64; 2]) -> bool {
        a[0] <= b[1] && b[0] <= a[1]
    }
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
#[must_use]
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Nearest-rank percentile (`q` in 0..=1) of sorted values; 0 for an empty slice.
#[must_use]
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

impl PolicyResult {
    /// Aggregates the samples of one run that took `duration_s` model seconds, with the
    /// engines' counters (one entry per engine).
    #[must_use]
    pub fn from_samples(
        scenario: &str,
        policy: &str,
        samples: &[Sample],
        duration_s: f64,
        engines: &[EngineCounters],
    ) -> Self {
        let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok).collect();
        let mut ttft: Vec<f64> = ok.iter().map(|s| s.ttft_s).collect();
        let mut e2e: Vec<f64> = ok.iter().map(|s| s.e2e_s).collect();
        ttft.sort_by(f64::total_cmp);
        e2e.sort_by(f64::total_cmp);
        let tokens: usize = ok.iter().map(|s| s.output_tokens).sum();
        let per_s = |n: f64| {
            if duration_s > 0.0 {
                n / duration_s
            } else {
                0.0
            }
        };
        let queries: u64 = engines.iter().map(|e| e.prefix_queries).sum();
        let hits: u64 = engines.iter().map(|e| e.prefix_hits).sum();
        Self {
            scenario: scenario.to_owned(),
            policy: policy.to_owned(),
            requests: samples.len(),
            failed: samples.len() - ok.len(),
            duration_s,
            throughput_rps: per_s(ok.len() as f64),
            output_tps: per_s(tokens as f64),
            ttft_mean_s: mean(&ttft),
            ttft_p50_s: percentile(&ttft, 0.5),
            ttft_p99_s: percentile(&ttft, 0.99),
            e2e_mean_s: mean(&e2e),
            e2e_p99_s: percentile(&e2e, 0.99),
            cache_hit_rate: if queries == 0 {
                0.0
            } else {
                hits as f64 / queries as f64
            },
            requests_per_engine: engines.iter().map(|e| e.requests).collect(),
            preemptions: engines.iter().map(|e| e.preemptions).sum(),
            throughput_vs_random: None,
            ttft_vs_random: None,
            clock: real_clock(),
            spread: None,
            throughput_differs: None,
            ttft_differs: None,
            within_slo: None,
        }
    }

    /// Sets [`PolicyResult::within_slo`] from the run's samples: successful requests with
    /// a TTFT at or below `slo_ttft_s` model seconds, over all requests sent (0 for none).
    #[must_use]
    pub fn with_slo(mut self, samples: &[Sample], slo_ttft_s: f64) -> Self {
        let good = samples
            .iter()
            .filter(|s| s.ok && s.ttft_s <= slo_ttft_s)
            .count();
        self.within_slo = Some(if samples.is_empty() {
            0.0
        } else {
            good as f64 / samples.len() as f64
        });
        self
    }

    /// One row for the runs of a policy under several seeds (`runs[i]` ran with
    /// `seeds[i]`): every time, rate and hit rate is the median over the runs, `requests`
    /// and `failed` are summed, the per-engine counts and preemptions are those of the run
    /// with the median throughput, and [`PolicyResult::spread`] holds the range of the
    /// throughput and mean TTFT. A single run is returned as it is.
    #[must_use]
    pub fn over_seeds(runs: &[Self], seeds: &[u64]) -> Option<Self> {
        let first = runs.first()?;
        if runs.len() == 1 {
            return Some(first.clone());
        }
        let m = |f: fn(&Self) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        let range = |f: fn(&Self) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            [
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ]
        };
        let mut by_tput: Vec<&Self> = runs.iter().collect();
        by_tput.sort_by(|a, b| a.throughput_rps.total_cmp(&b.throughput_rps));
        let mid = by_tput[by_tput.len() / 2];
        Some(Self {
            requests: runs.iter().map(|r| r.requests).sum(),
            failed: runs.iter().map(|r| r.failed).sum(),
            duration_s: m(|r| r.duration_s),
            throughput_rps: m(|r| r.throughput_rps),
            output_tps: m(|r| r.output_tps),
            ttft_mean_s: m(|r| r.ttft_mean_s),
            ttft_p50_s: m(|r| r.ttft_p50_s),
            ttft_p99_s: m(|r| r.ttft_p99_s),
            e2e_mean_s: m(|r| r.e2e_mean_s),
            e2e_p99_s: m(|r| r.e2e_p99_s),
            cache_hit_rate: m(|r| r.cache_hit_rate),
            within_slo: first.within_slo.map(|_| m(|r| r.within_slo.unwrap_or(0.0))),
            requests_per_engine: mid.requests_per_engine.clone(),
            preemptions: mid.preemptions,
            spread: Some(Spread {
                seeds: seeds.to_vec(),
                throughput_rps: range(|r| r.throughput_rps),
                ttft_mean_s: range(|r| r.ttft_mean_s),
            }),
            ..first.clone()
        })
    }

    /// The throughput range: the seeds' spread, or the single value.
    fn throughput_range(&self) -> [f64; 2] {
        self.spread
            .as_ref()
            .map_or([self.throughput_rps; 2], |s| s.throughput_rps)
    }

    /// The mean-TTFT range: the seeds' spread, or the single value.
    fn ttft_range(&self) -> [f64; 2] {
        self.spread
            .as_ref()
            .map_or([self.ttft_mean_s; 2], |s| s.ttft_mean_s)
    }
}

/// Fills the `*_vs_random` ratios of every row from the `random` row of the same scenario
/// and clock, and, where both rows have seed spreads, whether the spreads are clear of
/// each other.
pub fn fill_ratios(rows: &mut [PolicyResult]) {
    let baselines: Vec<PolicyResult> = rows
        .iter()
        .filter(|r| r.policy == "random")
        .cloned()
        .collect();
    for r in rows.iter_mut() {
        let Some(b) = baselines
            .iter()
            .find(|b| b.scenario == r.scenario && b.clock == r.clock)
        else {
            continue;
        };
        let (tput, ttft) = (b.throughput_rps, b.ttft_mean_s);
        r.throughput_vs_random = (tput > 0.0).then(|| r.throughput_rps / tput);
        r.ttft_vs_random = (ttft > 0.0).then(|| r.ttft_mean_s / ttft);
        if r.spread.is_some() && b.spread.is_some() && r.policy != "random" {
            r.throughput_differs =
                Some(!Spread::overlap(r.throughput_range(), b.throughput_range()));
            r.ttft_differs = Some(!Spread::overlap(r.ttft_range(), b.ttft_range()));
        }
    }
}

/// A ratio cell: `2.74x`, or `~1.04x` when the seeds' spreads overlap random's (no real
/// difference).
fn ratio(v: Option<f64>, differs: Option<bool>) -> String {
    let mark = if differs == Some(false) { "~" } else { "" };
    v.map_or_else(|| "-".to_owned(), |x| format!("{mark}{x:.2}x"))
}

/// A value with its seeds' range when there is one: `72.92 [71.84-73.10]`.
fn with_range(v: f64, range: Option<[f64; 2]>, digits: usize) -> String {
    match range {
        Some([lo, hi]) => format!("{v:.digits$} [{lo:.digits$}-{hi:.digits$}]"),
        None => format!("{v:.digits$}"),
    }
}

/// The markdown table of the rows (one table; rows in the given order).
#[must_use]
pub fn markdown_table(rows: &[PolicyResult]) -> String {
    let mut s = String::new();
    let slo = rows.iter().any(|r| r.within_slo.is_some());
    s.push_str(
        "| scenario | clock | policy | ok/sent | req/s | out tok/s | TTFT mean | TTFT p50 | TTFT p99 \
         | E2E mean | E2E p99 | cache hit | req per engine | req/s vs random | TTFT vs random |",
    );
    s.push_str(if slo { " within SLO |\n" } else { "\n" });
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    s.push_str(if slo { "---|\n" } else { "\n" });
    for r in rows {
        let per_engine = r
            .requests_per_engine
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("/");
        let _ = write!(
            s,
            "| {} | {} | {} | {}/{} | {} | {:.0} | {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.1}% | {} | {} | {} |",
            r.scenario,
            r.clock,
            r.policy,
            r.requests - r.failed,
            r.requests,
            with_range(
                r.throughput_rps,
                r.spread.as_ref().map(|s| s.throughput_rps),
                2
            ),
            r.output_tps,
            with_range(r.ttft_mean_s, r.spread.as_ref().map(|s| s.ttft_mean_s), 3),
            r.ttft_p50_s,
            r.ttft_p99_s,
            r.e2e_mean_s,
            r.e2e_p99_s,
            r.cache_hit_rate * 100.0,
            per_engine,
            ratio(r.throughput_vs_random, r.throughput_differs),
            ratio(r.ttft_vs_random, r.ttft_differs),
        );
        if slo {
            let cell = r
                .within_slo
                .map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0));
            let _ = write!(s, " {cell} |");
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests;
