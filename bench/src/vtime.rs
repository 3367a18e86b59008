//! Policy runs in virtual time: engines, router and load generator on one current-thread
//! Tokio runtime with paused time, connected by an in-memory network
//! ([`kthena_memnet::MemNet`]). The clock advances only when every task waits on a timer,
//! so a run's numbers depend on its inputs and seeds alone, not on the machine's load.
//!
//! The router is the real one ([`Router::start_in_memory`]): its request path, scheduler,
//! KV-event ingestion, scrape loop and accounting, reached over in-memory connections
//! instead of TCP. The engines are real `kthena-sim` engines at time scale 1, so virtual
//! seconds are model seconds.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use indicatif::ProgressBar;
use kthena_bench::report::{EngineCounters, PolicyResult};
use kthena_bench::workload::Workload;
use kthena_memnet::MemNet;
use kthena_router::upstream::InFlightBoard;
use kthena_router::{Overrides, ProcessEnv, Router};
use kthena_sim::SimHandle;

use crate::harness::{self, Load};
use kthena_bench::pool::Pool;

/// The engine-metrics scrape interval in virtual time: Go Kthena's default, 1 s.
const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// Seed of the engines' block hashes (vLLM's `PYTHONHASHSEED`): fixed, so that the block
/// hashes in a run's KV events are the same every time (the batches' wall-clock `ts`, which
/// the router does not read, differs).
const HASH_SEED: &str = "kthena-bench";

/// One run in virtual time: what to start and the load to send.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// Engines to start (1 for the direct anchor).
    pub(crate) engines: usize,
    /// Their configuration (the time scale is forced to 1).
    pub(crate) sim: kthena_sim::Config,
    /// The router's `scheduler:` section and whether it reads KV events; `None`: no router,
    /// the load goes straight to the single engine.
    pub(crate) router: Option<(String, bool)>,
    /// Seed of the router's random draws.
    pub(crate) seed: u64,
    /// Arrivals (virtual seconds from the start) and concurrency.
    pub(crate) arrivals: Vec<f64>,
    /// Most requests in flight.
    pub(crate) max_concurrency: usize,
    /// Router instances behind a round-robin front and whether they share in-flight counts.
    pub(crate) replicas: crate::replicas::Replicas,
    /// The client's deadline per request, model seconds (`None`: none).
    pub(crate) timeout_s: Option<f64>,
    /// Engines with their own profiles and roles (then `engines` is ignored); `None`:
    /// `engines` copies of `sim`, aggregated.
    pub(crate) pool: Option<Arc<Pool>>,
}

/// The samples of a run and the engines' counters, as a report row.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) samples: Vec<kthena_bench::report::Sample>,
    pub(crate) duration_s: f64,
    pub(crate) counters: Vec<EngineCounters>,
}

impl Outcome {
    /// The report row.
    pub(crate) fn row(&self, scenario: &str, policy: &str) -> PolicyResult {
        PolicyResult::from_samples(
            scenario,
            policy,
            &self.samples,
            self.duration_s,
            &self.counters,
        )
    }
}

/// Runs `run` with `workload` on its own OS thread, on a fresh current-thread runtime with
/// paused time, and waits for it.
///
/// # Errors
/// Engine or router start failures, a failed read of the engines' counters, or a panic of
/// the run's thread.
pub(crate) fn run_blocking(run: Run, workload: Arc<Workload>) -> anyhow::Result<Outcome> {
    let thread = std::thread::Builder::new()
        .name("virtual-time".to_owned())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .context("building the virtual-time runtime")?;
            rt.block_on(run_on_clock(run, workload))
        })
        .context("starting the virtual-time thread")?;
    thread
        .join()
        .map_err(|_| anyhow::anyhow!("the virtual-time run panicked"))?
}

/// The body of [`run_blocking`], on the paused clock.
async fn run_on_clock(run: Run, workload: Arc<Workload>) -> anyhow::Result<Outcome> {
    let net = MemNet::new();
    let pool = run
        .pool
        .clone()
        .unwrap_or_else(|| Arc::new(Pool::uniform(run.engines)));
    let mut sims = Vec::with_capacity(pool.engines.len());
    let kv = run.router.as_ref().is_some_and(|(_, kv)| *kv);
    for i in 0..pool.engines.len() {
        let mut cfg = pool
            .engine_config(i, &run.sim)
            .with_ephemeral_port()
            .with_time_scale(1.0)
            .with_hash_seed(HASH_SEED);
        cfg.kv_events_port = kv.then_some(0);
        sims.push(kthena_sim::spawn_in_memory(cfg, &net).await?);
    }
    let client = harness::memory_client(&net);
    let mut routers = Vec::new();
    let mut targets = Vec::new();
    match &run.router {
        Some((yaml, kv)) => {
            let board = run.replicas.board();
            for i in 0..run.replicas.routers.max(1) {
                // Router i draws from seed + i: one router keeps the usual rows' seed.
                let seed = run.seed.wrapping_add(i as u64);
                let (router, dir) =
                    start_router(&net, &sims, (yaml, &pool), *kv, seed, board.clone()).await?;
                let target = format!("http://{}", router.addr);
                harness::wait_ready(&client, &target).await?;
                targets.push(target);
                routers.push((router, dir));
            }
        }
        None => targets.push(sims[0].base_url()),
    }
    let load = Load {
        targets,
        arrivals: run.arrivals,
        max_concurrency: run.max_concurrency,
        time_scale: 1.0,
        timeout: run.timeout_s.map(Duration::from_secs_f64),
    };
    let (samples, took) = harness::drive(&client, &workload, &load, &ProgressBar::hidden()).await;
    let mut counters = Vec::with_capacity(sims.len());
    for s in &sims {
        counters.push(harness::engine_counters(&client, &s.base_url()).await?);
    }
    for (router, _dir) in routers {
        router.shutdown().await;
    }
    for s in sims {
        s.kill().await;
    }
    Ok(Outcome {
        samples,
        duration_s: took.as_secs_f64(),
        counters,
    })
}

/// A router on `net` in front of `sims`, with its config folder (kept until the run ends),
/// sharing its in-flight counts on `in_flight` when given; `pool` gives the endpoints'
/// labels and the ModelServer's P/D selector.
async fn start_router(
    net: &MemNet,
    sims: &[SimHandle],
    (scheduler_yaml, pool): (&str, &Pool),
    kv_events: bool,
    seed: u64,
    in_flight: Option<InFlightBoard>,
) -> anyhow::Result<(Router, tempfile::TempDir)> {
    let dir = tempfile::tempdir().context("creating a temporary folder")?;
    let path = harness::write_pool_router_config(
        dir.path(),
        sims,
        scheduler_yaml,
        SCRAPE_INTERVAL,
        kv_events,
        Some(pool),
    )?;
    let overrides = Overrides {
        port: Some(0),
        metrics_port: Some(0),
        debug_port: Some(0),
        ..Overrides::default()
    };
    let mut cfg = kthena_router::load_config(&path, &ProcessEnv, overrides)
        .with_context(|| format!("router config {}", path.display()))?;
    cfg.random_seed = Some(seed);
    let router = Router::start_in_memory_with(cfg, net.clone(), in_flight).await?;
    Ok((router, dir))
}

/// Runs every job on `threads` OS threads (each run on its own paused runtime, so runs in
/// parallel give the numbers they give alone); results in job order. `done(i, outcome)` is
/// called as each finishes.
pub(crate) fn run_many(
    jobs: Vec<(Run, Arc<Workload>)>,
    threads: usize,
    done: &(dyn Fn(usize, &anyhow::Result<Outcome>) + Sync),
) -> Vec<anyhow::Result<Outcome>> {
    let n = jobs.len();
    let mut queue: Vec<_> = jobs.into_iter().enumerate().collect();
    queue.reverse();
    let queue = std::sync::Mutex::new(queue);
    let results = std::sync::Mutex::new((0..n).map(|_| None).collect::<Vec<_>>());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            s.spawn(|| {
                loop {
                    // Jobs are taken in order (the queue was reversed above).
                    let next = queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .pop();
                    let Some((i, (run, workload))) = next else {
                        return;
                    };
                    let out = run_blocking(run, workload);
                    done(i, &out);
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(out);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("a virtual-time run did not finish"))))
        .collect()
}
