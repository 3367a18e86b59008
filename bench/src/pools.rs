//! The engine-topology scenarios (`--scenario wide8|wide16|hetero|pd`,
//! [`kthena_bench::pool`]): our policies in virtual time over the scenario's pool (and, for
//! `pd`, over the same engines aggregated), the direct runs of its ceiling, and with
//! `--peers` the peer routers that can serve the pool, in real time: our router's `random`
//! on the pool as their baseline, then every installed peer that can serve it, each in front
//! of fresh engines of the pool at time scale 1 (an aggregated pool gets the peers' usual
//! rows, a P/D pool vllm-router's vLLM P/D mode, [`PeerPolicy::PD`]).

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kthena_bench::pool::{self, Direct, Pool, PoolScenario};
use kthena_bench::report::{self, PolicyResult};
use kthena_bench::scenario::{self, Policy, Scenario};
use kthena_bench::workload::{Workload, poisson_arrivals};

use crate::harness::{self, Load, Runtimes};
use crate::peer_policy::{self, PeerPolicy};
use crate::{Args, Clock, replicas, vtime};

/// The policies of a pool table when `--policies` names none: random, least-request, the
/// two cache-aware pairs and the best combination.
const DEFAULT_POLICIES: [&str; 5] = [
    "random",
    "least-request",
    "least-request+prefix-cache",
    "least-request+kvcache-aware",
    scenario::BEST,
];

/// The policies that also run over the aggregated pool of the `pd` scenario.
const AGGREGATED_POLICIES: [&str; 3] = ["random", "least-request+kvcache-aware", scenario::BEST];

/// The `--scenario` names of the pool scenarios (`docs/workload-zoo.md`, "Engine pools"):
/// `long` scaled to 8 and 16 engines, 2 H100 + 2 L40S engines, and 2 prefill + 2 decode
/// engines against the same 4 aggregated.
pub(crate) const NAMES: [&str; 4] = ["wide8", "wide16", "hetero", "pd"];

/// The pool scenario of `--scenario`, with the size overrides applied; `None` for the
/// other scenarios.
pub(crate) fn scenario_of(args: &Args) -> Option<PoolScenario> {
    let mut ps = match args.scenario.as_str() {
        "wide8" => pool::wide(8, args.quick, args.seed),
        "wide16" => pool::wide(16, args.quick, args.seed),
        "hetero" => pool::hetero(args.quick, args.seed, args.num_gpu_blocks),
        "pd" => pool::pd(args.quick, args.seed),
        _ => return None,
    };
    crate::apply_overrides(args, &mut ps.scenario);
    Some(ps)
}

/// Runs a pool scenario and prints its table (and the ceiling line); `--json`, the chart
/// and `--peers` as for `long`.
///
/// # Errors
/// A run fails, or the table, JSON or chart cannot be written.
pub(crate) async fn run(args: &Args, rt: &Runtimes, ps: PoolScenario) -> anyhow::Result<()> {
    let tokenizer = match &args.tokenizer {
        Some(p) => kthena_sim::Tokenizer::from_file(p)?,
        None => kthena_sim::Tokenizer::fallback(),
    };
    let policies = policies(args)?;
    let (args2, ps2, tok2) = (args.clone(), ps.clone(), tokenizer.clone());
    let mut rows =
        tokio::task::spawn_blocking(move || virtual_rows(&args2, &ps2, &policies, &tok2)).await??;
    let ceiling = pool::ceiling(
        &ps.directs,
        &ps.directs
            .iter()
            .map(|d| {
                rows.iter()
                    .find(|r| r.policy == d.name)
                    .map(|r| r.throughput_rps)
            })
            .collect::<Vec<_>>(),
    );
    if args.peers {
        let workload = Arc::new(Workload::generate(ps.scenario.workload, &tokenizer));
        rows.extend(real_rows(args, rt, &ps, &workload).await?);
    }
    report::fill_ratios(&mut rows);
    let name = &ps.scenario.name;
    if !args.no_chart {
        std::fs::create_dir_all(&args.chart_dir)
            .with_context(|| format!("creating {}", args.chart_dir.display()))?;
        let path = args.chart_dir.join(format!("{name}.png"));
        match kthena_bench::chart::draw_scenario(&path, name, &rows) {
            Ok(()) => eprintln!("chart: {}", path.display()),
            Err(e) => eprintln!("chart {} not drawn: {e}", path.display()),
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", report::markdown_table(&rows))?;
    if let Some(line) = ceiling_line(ceiling, &rows) {
        writeln!(out, "{line}")?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `ceiling: X req/s = Y× random (virtual)`, when there is a ceiling and a virtual random row.
fn ceiling_line(ceiling: Option<f64>, rows: &[PolicyResult]) -> Option<String> {
    let c = ceiling?;
    let random = rows
        .iter()
        .find(|r| r.policy == "random" && r.clock == "virtual")
        .map(|r| r.throughput_rps)
        .filter(|t| *t > 0.0);
    Some(match random {
        Some(r) => format!("ceiling: {c:.2} req/s = {:.2}x random (virtual)", c / r),
        None => format!("ceiling: {c:.2} req/s"),
    })
}

/// The policies of the table: `--policies` (names, `best`, and the `--policy-file` ones)
/// or [`DEFAULT_POLICIES`].
fn policies(args: &Args) -> anyhow::Result<Vec<Policy>> {
    let mut all = scenario::policies();
    for path in &args.policy_file {
        all.push(crate::policy_from_file(path)?);
    }
    if args.policies.is_empty() {
        all.retain(|p| {
            DEFAULT_POLICIES.contains(&p.name.as_str()) || !scenario::policies().contains(p)
        });
    } else {
        all.retain(|p| crate::wanted(args, &p.name));
    }
    Ok(all)
}

/// One row of a virtual-time table: a policy over a pool, or a direct run.
struct Variant {
    name: String,
    /// The router's policy; `None`: a direct run.
    policy: Option<Policy>,
    pool: Pool,
    /// The row gets `1/share` of the load (see [`Direct::share`]).
    share: usize,
}

fn variants(args: &Args, ps: &PoolScenario, policies: &[Policy]) -> Vec<Variant> {
    let mut out: Vec<Variant> = policies
        .iter()
        .map(|p| Variant {
            name: p.name.clone(),
            policy: Some(p.clone()),
            pool: ps.pool.clone(),
            share: 1,
        })
        .collect();
    if let Some(agg) = &ps.aggregated {
        for p in policies {
            if AGGREGATED_POLICIES.contains(&p.name.as_str()) || args.policies.contains(&p.name) {
                out.push(Variant {
                    name: format!("aggregated: {}", p.name),
                    policy: Some(p.clone()),
                    pool: agg.clone(),
                    share: 1,
                });
            }
        }
    }
    if crate::wanted(args, "direct") {
        out.extend(ps.directs.iter().map(|d: &Direct| Variant {
            name: d.name.clone(),
            policy: None,
            pool: Pool {
                engines: vec![pool::EngineSpec {
                    profile: d.profile.clone(),
                    role: kthena_sim::Role::Both,
                }],
                pd: false,
            },
            share: d.share,
        }));
    }
    out
}

/// The virtual-time rows: every variant under each seed, on `--jobs` threads; one row per
/// variant, the median over the seeds.
fn virtual_rows(
    args: &Args,
    ps: &PoolScenario,
    policies: &[Policy],
    tokenizer: &kthena_sim::Tokenizer,
) -> anyhow::Result<Vec<PolicyResult>> {
    let sc = &ps.scenario;
    let seeds: Vec<u64> = (0..args.seeds.max(1)).map(|i| args.seed + i).collect();
    let variants = variants(args, ps, policies);
    let mut jobs = Vec::new();
    for &seed in &seeds {
        let mut spec = sc.workload;
        spec.seed = seed;
        let workload = Arc::new(Workload::generate(spec, tokenizer));
        for v in &variants {
            jobs.push(job(args, sc, v, seed, &workload));
        }
    }
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let per_seed = variants.len();
    let started = tokio::time::Instant::now();
    let done = |i: usize, out: &anyhow::Result<vtime::Outcome>| {
        let (name, seed) = (&variants[i % per_seed].name, seeds[i / per_seed]);
        match out {
            Ok(o) => eprintln!(
                "{} {name} seed {seed}: {:.2} req/s ({:.0} s wall so far)",
                sc.name,
                o.row(&sc.name, name).throughput_rps,
                started.elapsed().as_secs_f64()
            ),
            Err(e) => eprintln!("{} {name} seed {seed}: failed: {e:#}", sc.name),
        }
    };
    let outcomes = vtime::run_many(jobs, threads, &done);
    let mut runs: Vec<Vec<PolicyResult>> = vec![Vec::new(); per_seed];
    for (i, out) in outcomes.into_iter().enumerate() {
        let mut row = out?.row(&sc.name, &variants[i % per_seed].name);
        row.clock = "virtual".to_owned();
        runs[i % per_seed].push(row);
    }
    Ok(runs
        .iter()
        .filter_map(|r| PolicyResult::over_seeds(r, &seeds))
        .collect())
}

/// The virtual-time run of `v` with `seed` (the workload generated with that seed).
fn job(
    args: &Args,
    sc: &Scenario,
    v: &Variant,
    seed: u64,
    workload: &Arc<Workload>,
) -> (vtime::Run, Arc<Workload>) {
    let kv = v.policy.as_ref().is_some_and(|p| crate::kv_events(args, p));
    let workload = if v.share > 1 {
        let groups = sc.workload.num_groups.div_ceil(v.share);
        Arc::new(Workload::clone(workload).with_groups(groups))
    } else {
        Arc::clone(workload)
    };
    let run = vtime::Run {
        engines: v.pool.engines.len(),
        sim: crate::sim_config(args, kv),
        router: v.policy.as_ref().map(|p| (p.scheduler_yaml.clone(), kv)),
        seed,
        arrivals: poisson_arrivals(
            workload.sessions.len(),
            sc.request_rate / v.share as f64,
            seed,
        ),
        max_concurrency: sc.max_concurrency.div_ceil(v.share),
        replicas: replicas::Replicas::ONE,
        timeout_s: sc.timeout_s,
        pool: Some(Arc::new(v.pool.clone())),
    };
    (run, workload)
}

/// Our `random` row and the peers' rows, in real time.
///
/// # Errors
/// Engines, router or a peer cannot start, or an engine's counters cannot be read.
async fn real_rows(
    args: &Args,
    rt: &Runtimes,
    ps: &PoolScenario,
    workload: &Arc<Workload>,
) -> anyhow::Result<Vec<PolicyResult>> {
    let mut args = args.clone();
    args.clock = Clock::Real;
    args.time_scale = 1.0;
    let args = &args;
    let sc = &ps.scenario;
    let pool = Arc::new(ps.pool.clone());
    let random = scenario::policies().swap_remove(0);
    let mut rows = vec![random_row(args, rt, ps, workload, &random).await?];
    let setup = peer_policy::Setup {
        rt,
        engines: pool.engines.len(),
        sim: crate::sim_config(args, false),
        arrivals: crate::arrivals(args, sc, workload.sessions.len()),
        max_concurrency: sc.max_concurrency,
        time_scale: 1.0,
        timeout_s: sc.timeout_s,
        slo_ttft_s: sc.slo_ttft_s,
        pool: Some(Arc::clone(&pool)),
    };
    let candidates: &[PeerPolicy] = if pool.pd {
        &PeerPolicy::PD
    } else {
        &PeerPolicy::ALL
    };
    let named = args
        .policies
        .iter()
        .any(|p| candidates.iter().any(|pp| pp.name() == *p));
    for pp in candidates {
        if named && !crate::wanted(args, &pp.name()) {
            continue;
        }
        if let Some(row) = peer_policy::run(&setup, &sc.name, workload, *pp).await? {
            rows.push(row);
        }
    }
    Ok(rows)
}

/// `policy` (our router) over fresh engines of the pool, in real time at time scale 1.
async fn random_row(
    args: &Args,
    rt: &Runtimes,
    ps: &PoolScenario,
    workload: &Arc<Workload>,
    policy: &Policy,
) -> anyhow::Result<PolicyResult> {
    let sc = &ps.scenario;
    let pool: &Pool = &ps.pool;
    let sims = harness::start_pool_sims(rt, pool, &crate::sim_config(args, false)).await?;
    let router = match harness::start_pool_router(
        rt,
        &sims,
        &policy.scheduler_yaml,
        (Duration::from_secs(1), false),
        Some(pool),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => {
            harness::stop_sims(rt, sims).await;
            return Err(e.context(format!("starting the router for {}", policy.name)));
        }
    };
    let client = harness::http_client();
    let target = format!("http://{}", router.router.addr);
    let result = async {
        harness::wait_ready(&client, &target).await?;
        let load = Load {
            targets: vec![target.clone()],
            arrivals: crate::arrivals(args, sc, workload.sessions.len()),
            max_concurrency: sc.max_concurrency,
            time_scale: 1.0,
            timeout: sc.timeout_s.map(Duration::from_secs_f64),
        };
        let pb = crate::progress(
            workload.num_requests(),
            format!("{} {}", sc.name, policy.name),
        );
        let (samples, wall) = harness::drive(&client, workload, &load, &pb).await;
        pb.finish();
        let mut counters = Vec::new();
        for s in &sims {
            counters.push(harness::engine_counters(&client, &s.base_url()).await?);
        }
        Ok::<_, anyhow::Error>(PolicyResult::from_samples(
            &sc.name,
            &policy.name,
            &samples,
            wall.as_secs_f64(),
            &counters,
        ))
    }
    .await;
    harness::stop_router(rt, router).await;
    harness::stop_sims(rt, sims).await;
    result
}
