//! `saturation`: open-loop arrivals near and above the pool's capacity, where a request
//! that misses its deadline fails and only answered requests count.

use kthena_bench::scenario::Scenario;

/// The client's deadline per request, model seconds: a request not answered in full by
/// then is abandoned and counts as failed.
pub(crate) const DEADLINE_S: f64 = 30.0;

/// The TTFT objective of the `within SLO` column, model seconds.
pub(crate) const SLO_TTFT_S: f64 = 2.0;

/// The offered rates, requests per model second: near the capacity of three engines under
/// the best policy on this workload, and 1.5 times it.
pub(crate) const RATES: [(&str, f64); 2] = [("saturation-near", 80.0), ("saturation-over", 120.0)];

/// The `saturation` scenarios: the `long` request shape (4,096-token system prompts over
/// 128 groups, 256-token questions, 128 output tokens), 8 requests per group with `quick`
/// (1,024) or 24 (3,072), Poisson arrivals at each of [`RATES`] with no client-side cap
/// on requests in flight, [`DEADLINE_S`] per request and the [`SLO_TTFT_S`] objective.
pub(crate) fn build(quick: bool, seed: u64) -> Vec<Scenario> {
    RATES
        .iter()
        .map(|&(name, rate)| {
            let mut sc = Scenario::long(quick, seed);
            sc.name = name.to_owned();
            sc.workload.num_groups = 128;
            sc.workload.prompts_per_group = if quick { 8 } else { 24 };
            sc.request_rate = rate;
            sc.max_concurrency = 100_000;
            sc.timeout_s = Some(DEADLINE_S);
            sc.slo_ttft_s = Some(SLO_TTFT_S);
            sc
        })
        .collect()
}
