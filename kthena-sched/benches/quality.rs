//! Scheduling quality, not speed: prefix-hit ratio and load imbalance per plugin combination
//! on a skewed shared-prefix workload (the case where Go Kthena's cache-aware routing piled
//! requests onto one pod, Go Kthena's benchmark blog
//! `docs/kthena/blog/2025-09-09-benchmark/index.md`).
//!
//! A seeded discrete simulation: each step one request arrives from one of 8 prefix groups
//! (Zipf-like weights, the hottest group gets ~37% of requests), is scheduled over 8
//! endpoints, and stays in flight for 64 steps. Each endpoint's KV cache is modelled as an LRU
//! of the last 2 prefix groups it served; "hit" means the group was in the chosen endpoint's
//! LRU (8 endpoints × 2 slots hold all 8 groups, so a perfect partition hits ~100% and
//! random placement ~25%).
//!
//! `cargo bench -p kthena-sched --bench quality`

#![allow(clippy::unwrap_used, reason = "benchmark setup")]
#![allow(
    clippy::print_stdout,
    reason = "a benchmark that prints its measurements"
)]

use std::collections::VecDeque;

use kthena_sched::{Candidate, Config, Metrics, Request, Scheduler};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ENDPOINTS: usize = 8;
const GROUPS: usize = 8;
const LIFETIME: usize = 64;
const STEPS: usize = 20_000;
const CACHED_GROUPS: usize = 2;

struct Outcome {
    hit_ratio: f64,
    mean_spread: f64,
    max_in_flight: u32,
}

fn run(yaml: &str) -> Outcome {
    let sched = Scheduler::builder(Config::from_yaml(yaml).unwrap())
        .seed(7)
        .build()
        .unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let weights: Vec<f64> = (1..=GROUPS).map(|k| 1.0 / k as f64).collect();
    let total: f64 = weights.iter().sum();
    let systems: Vec<String> = (0..GROUPS)
        .map(|g| format!("system prompt of tenant {g}: ").repeat(10))
        .collect();
    let mut in_flight = [0u32; ENDPOINTS];
    let mut cached: Vec<VecDeque<usize>> = vec![VecDeque::new(); ENDPOINTS];
    let mut live: VecDeque<(usize, usize)> = VecDeque::new();
    let (mut hits, mut spread_sum, mut max_seen) = (0usize, 0u64, 0u32);
    for step in 0..STEPS {
        while live.front().is_some_and(|(end, _)| *end <= step) {
            let (_, ep) = live.pop_front().unwrap();
            in_flight[ep] -= 1;
        }
        let mut x = rng.random::<f64>() * total;
        let mut group = GROUPS - 1;
        for (g, w) in weights.iter().enumerate() {
            if x < *w {
                group = g;
                break;
            }
            x -= w;
        }
        let prompt = format!("{}question {step}", systems[group]);
        let cands: Vec<Candidate> = (0..ENDPOINTS)
            .map(|i| {
                Candidate::new(format!("ep{i}"), "m").with_metrics(Metrics {
                    in_flight: in_flight[i],
                    running_requests: in_flight[i],
                    ..Metrics::default()
                })
            })
            .collect();
        let req = Request::new("m").with_prompt(&prompt);
        let best = sched.schedule(&req, &cands).unwrap().best().index;
        sched.on_scheduled(&req, &cands[best]);
        let lru = &mut cached[best];
        if let Some(pos) = lru.iter().position(|g| *g == group) {
            hits += 1;
            lru.remove(pos);
        } else if lru.len() == CACHED_GROUPS {
            lru.pop_back();
        }
        lru.push_front(group);
        in_flight[best] += 1;
        live.push_back((step + LIFETIME, best));
        let (mx, mn) = (
            *in_flight.iter().max().unwrap(),
            *in_flight.iter().min().unwrap(),
        );
        spread_sum += u64::from(mx - mn);
        max_seen = max_seen.max(mx);
    }
    Outcome {
        hit_ratio: hits as f64 / STEPS as f64,
        mean_spread: spread_sum as f64 / STEPS as f64,
        max_in_flight: max_seen,
    }
}

fn main() {
    let combos = [
        ("random", "plugins: {Score: {enabled: [{name: random}]}}"),
        (
            "least-request",
            "plugins: {Score: {enabled: [{name: least-request}]}}",
        ),
        (
            "least-request + prefix-cache (Kthena)",
            "plugins: {Score: {enabled: [{name: least-request}, {name: prefix-cache}]}}",
        ),
        (
            "prefix-cache only",
            "plugins: {Score: {enabled: [{name: prefix-cache}]}}",
        ),
        (
            "prefix-cache + load-imbalance",
            "plugins: {Filter: {enabled: [load-imbalance]}, Score: {enabled: [{name: prefix-cache}]}}",
        ),
        (
            "least-request + prefix-cache + load-imbalance",
            "plugins: {Filter: {enabled: [load-imbalance]}, Score: {enabled: [{name: least-request}, {name: prefix-cache}]}}",
        ),
        (
            "  ... with balanceAbsThreshold 4",
            "pluginConfig: [{name: load-imbalance, args: {balanceAbsThreshold: 4}}]\nplugins: {Filter: {enabled: [load-imbalance]}, Score: {enabled: [{name: least-request}, {name: prefix-cache}]}}",
        ),
    ];
    println!(
        "{ENDPOINTS} endpoints, {GROUPS} prefix groups (Zipf), {LIFETIME}-step lifetime, {STEPS} requests"
    );
    println!(
        "{:<48} {:>9} {:>12} {:>13}",
        "plugins", "hit ratio", "mean max-min", "max in-flight"
    );
    for (name, yaml) in combos {
        let o = run(yaml);
        println!(
            "{name:<48} {:>9.3} {:>12.2} {:>13}",
            o.hit_ratio, o.mean_spread, o.max_in_flight
        );
    }
}
