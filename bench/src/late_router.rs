//! `--late-router`: does a router that starts late know what the engines hold?
//!
//! The long scenario's sessions are cut in three, in sending order: the first half, the next
//! 10% of the rest (the probe) and the remainder. The first half always goes through a
//! first router (the best policy, subscribed to the engines' KV events), the way a
//! production cluster's engines fill their caches before a router restarts or fails over;
//! then, for each variant:
//!
//! * `from the start`: the same router goes on;
//! * `late, no replay`: the first router stops and a new one starts, subscribed to the
//!   engines' KV events only (it learns each prefix from that engine's next batches);
//! * `late, replay`: the new router also has each engine's replay address
//!   (`kvEventsReplay`) and asks it, at subscription, for every batch its buffer holds.
//!
//! Each segment is driven to its end before the next starts (open loop within it, at the
//! scenario's rate and concurrency), so the engines' counter deltas over a segment are
//! exactly its requests' cached and prompt tokens: the hit rate reported is the table's
//! cache-hit column (`vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total`)
//! over the probe and over all of the second half. Everything runs in virtual time
//! ([`crate::vtime`]): the numbers depend on the seeds alone.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::ProgressBar;
use kthena_bench::report::EngineCounters;
use kthena_bench::scenario::{self, Scenario};
use kthena_bench::workload::{Workload, poisson_arrivals};
use kthena_memnet::MemNet;
use kthena_router::{Overrides, ProcessEnv, Router};
use kthena_sim::SimHandle;

use crate::harness::{self, HttpClient, Load};

/// The engine-metrics scrape interval in virtual time (as [`crate::vtime`]).
const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// The engines' block-hash seed (as [`crate::vtime`]).
const HASH_SEED: &str = "kthena-bench";

/// Which router serves the second half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    FromStart,
    LateNoReplay,
    LateReplay,
}

impl Variant {
    const ALL: [Self; 3] = [Self::FromStart, Self::LateNoReplay, Self::LateReplay];

    fn label(self) -> &'static str {
        match self {
            Self::FromStart => "from the start",
            Self::LateNoReplay => "late, no replay (before)",
            Self::LateReplay => "late, replay (after)",
        }
    }
}

/// Prefix-cache hit rates of the second half: over the probe and over all of it.
#[derive(Debug, Clone, Copy)]
struct HitRates {
    probe: f64,
    rest: f64,
}

/// Runs the three variants for every seed (on `threads` OS threads, each run on its own
/// paused clock) and returns the markdown table: per variant, the median hit rates over the
/// seeds with their range.
///
/// # Errors
/// Engine or router start failures, or a failed read of the engines' counters.
pub(crate) fn run(
    sc: &Scenario,
    sim: &kthena_sim::Config,
    engines: usize,
    seeds: &[u64],
    tokenizer: &kthena_sim::Tokenizer,
    threads: usize,
) -> anyhow::Result<String> {
    let mut jobs = Vec::new();
    for &seed in seeds {
        let mut spec = sc.workload;
        spec.seed = seed;
        let workload = Arc::new(Workload::generate(spec, tokenizer));
        for v in Variant::ALL {
            jobs.push((v, seed, Arc::clone(&workload)));
        }
    }
    let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let next = queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .pop();
                    let Some((i, (v, seed, workload))) = next else {
                        return;
                    };
                    let out = run_blocking(sc, sim, engines, v, seed, workload);
                    match &out {
                        Ok(h) => eprintln!(
                            "late router, {} seed {seed}: hit {:.1}% (first 10%), {:.1}% (rest)",
                            v.label(),
                            h.probe * 100.0,
                            h.rest * 100.0
                        ),
                        Err(e) => {
                            eprintln!("late router, {} seed {seed}: failed: {e:#}", v.label())
                        }
                    }
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push((i, v, out));
                }
            });
        }
    });
    let mut results = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(i, _, _)| *i);
    let mut per_variant: Vec<(Variant, Vec<HitRates>)> =
        Variant::ALL.iter().map(|v| (*v, Vec::new())).collect();
    for (_, v, out) in results {
        let h = out?;
        if let Some((_, list)) = per_variant.iter_mut().find(|(x, _)| *x == v) {
            list.push(h);
        }
    }
    Ok(table(&per_variant))
}

/// The markdown table of the variants' median hit rates (range over the seeds).
fn table(rows: &[(Variant, Vec<HitRates>)]) -> String {
    let cell = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        let (lo, hi) = (xs.first().copied(), xs.last().copied());
        let mid = xs.get(xs.len() / 2).copied();
        match (mid, lo, hi) {
            (Some(m), Some(lo), Some(hi)) if xs.len() > 1 => {
                format!("{:.1}% ({:.1}–{:.1})", m * 100.0, lo * 100.0, hi * 100.0)
            }
            (Some(m), _, _) => format!("{:.1}%", m * 100.0),
            _ => "–".to_owned(),
        }
    };
    let mut out = String::from(
        "| second half served by | cache hit, first 10% of the second half | cache hit, all of the second half |\n\
         |---|---|---|\n",
    );
    for (v, hits) in rows {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            v.label(),
            cell(hits.iter().map(|h| h.probe).collect()),
            cell(hits.iter().map(|h| h.rest).collect())
        ));
    }
    out
}

/// One run on its own thread and paused clock.
fn run_blocking(
    sc: &Scenario,
    sim: &kthena_sim::Config,
    engines: usize,
    variant: Variant,
    seed: u64,
    workload: Arc<Workload>,
) -> anyhow::Result<HitRates> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("building the virtual-time runtime")?;
    rt.block_on(run_on_clock(sc, sim, engines, variant, seed, workload))
}

/// The first half through a first router, then the probe and the rest through the router
/// of `variant`; the hit rates of the last two segments.
async fn run_on_clock(
    sc: &Scenario,
    sim: &kthena_sim::Config,
    engines: usize,
    variant: Variant,
    seed: u64,
    workload: Arc<Workload>,
) -> anyhow::Result<HitRates> {
    let net = MemNet::new();
    let mut sims = Vec::new();
    for _ in 0..engines {
        let mut cfg = sim
            .clone()
            .with_ephemeral_port()
            .with_time_scale(1.0)
            .with_hash_seed(HASH_SEED);
        cfg.kv_events_port = Some(0);
        cfg.kv_events_replay_port = Some(0);
        sims.push(kthena_sim::spawn_in_memory(cfg, &net).await?);
    }
    let client = harness::memory_client(&net);
    let n = workload.sessions.len();
    let arrivals = poisson_arrivals(n, sc.request_rate, seed);
    let half = n / 2;
    let probe_end = half + (n - half).div_ceil(10);
    let segment = |a: usize, b: usize| Segment {
        workload: Arc::new(Workload {
            sessions: workload.sessions[a..b].to_vec(),
            ..Workload::clone(&workload)
        }),
        arrivals: arrivals[a..b].iter().map(|t| t - arrivals[a]).collect(),
        max_concurrency: sc.max_concurrency,
    };
    let mut router = start_router(&net, &sims, false, seed, &client).await?;
    segment(0, half).drive(&client, &router).await;
    let before = totals(&client, &sims).await?;
    if variant != Variant::FromStart {
        router.0.shutdown().await;
        let replay = variant == Variant::LateReplay;
        router = start_router(&net, &sims, replay, seed + 1, &client).await?;
    }
    segment(half, probe_end).drive(&client, &router).await;
    let probe = totals(&client, &sims).await?;
    segment(probe_end, n).drive(&client, &router).await;
    let end = totals(&client, &sims).await?;
    router.0.shutdown().await;
    for s in sims {
        s.kill().await;
    }
    Ok(HitRates {
        probe: hit_rate(before, probe),
        rest: hit_rate(before, end),
    })
}

/// Cached over prompt tokens between two readings of the summed counters.
fn hit_rate(from: EngineCounters, to: EngineCounters) -> f64 {
    let queries = to.prefix_queries.saturating_sub(from.prefix_queries);
    let hits = to.prefix_hits.saturating_sub(from.prefix_hits);
    if queries == 0 {
        0.0
    } else {
        hits as f64 / queries as f64
    }
}

/// The engines' prefix-cache counters, summed.
async fn totals(client: &HttpClient, sims: &[SimHandle]) -> anyhow::Result<EngineCounters> {
    let mut sum = EngineCounters::default();
    for s in sims {
        let c = harness::engine_counters(client, &s.base_url()).await?;
        sum.prefix_queries += c.prefix_queries;
        sum.prefix_hits += c.prefix_hits;
    }
    Ok(sum)
}

/// A part of the workload with its arrivals (from its own start).
struct Segment {
    workload: Arc<Workload>,
    arrivals: Vec<f64>,
    max_concurrency: usize,
}

impl Segment {
    /// Sends the segment through `router` and waits for its last answer.
    async fn drive(self, client: &HttpClient, router: &(Router, tempfile::TempDir)) {
        let load = Load {
            targets: vec![format!("http://{}", router.0.addr)],
            arrivals: self.arrivals,
            max_concurrency: self.max_concurrency,
            time_scale: 1.0,
            timeout: None,
        };
        harness::drive(client, &self.workload, &load, &ProgressBar::hidden()).await;
    }
}

/// A ready router with the best policy in front of `sims`, subscribed to their KV events
/// and, with `replay`, given their replay addresses; with its config folder.
async fn start_router(
    net: &MemNet,
    sims: &[SimHandle],
    replay: bool,
    seed: u64,
    client: &HttpClient,
) -> anyhow::Result<(Router, tempfile::TempDir)> {
    let best = scenario::policies()
        .into_iter()
        .find(|p| p.name == scenario::BEST)
        .context("the best policy")?;
    let dir = tempfile::tempdir().context("creating a temporary folder")?;
    let path = harness::write_router_config(
        dir.path(),
        sims,
        &best.scheduler_yaml,
        SCRAPE_INTERVAL,
        true,
    )?;
    if replay {
        let mut text = std::fs::read_to_string(&path)?;
        for s in sims {
            let ip = s.addr().ip();
            let (Some(events), Some(rp)) = (s.kv_events_port(), s.kv_events_replay_port()) else {
                continue;
            };
            let from = format!("kvEvents: \"tcp://{ip}:{events}\"");
            let to = format!("{from}, kvEventsReplay: \"tcp://{ip}:{rp}\"");
            text = text.replace(&from, &to);
        }
        std::fs::write(&path, text)?;
    }
    let overrides = Overrides {
        port: Some(0),
        metrics_port: Some(0),
        debug_port: Some(0),
        ..Overrides::default()
    };
    let mut cfg = kthena_router::load_config(&path, &ProcessEnv, overrides)
        .with_context(|| format!("router config {}", path.display()))?;
    cfg.random_seed = Some(seed);
    let router = Router::start_in_memory(cfg, net.clone()).await?;
    harness::wait_ready(client, &format!("http://{}", router.addr)).await?;
    Ok((router, dir))
}
