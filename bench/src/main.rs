//! `kthena-bench`: replays Go Kthena's published routing benchmark on simulated engines, and
//! measures the router's overhead. See `docs/benchmarks.md`.

mod harness;
mod late_router;
mod loadgen;
mod overhead;
mod peer_policy;
mod peers;
mod prompt_cost;
mod replicas;
mod soak_run;
mod vtime;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use kthena_bench::report::{self, PolicyResult};
use kthena_bench::scenario::{self, BENCH_GPU_BLOCKS, Policy, Scenario};
use kthena_bench::workload::{Workload, poisson_arrivals};
use tracing_subscriber::EnvFilter;

use crate::harness::{Load, MODEL, Runtimes};

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    /// 4096-token shared system prompt, 256-token question.
    Long,
    /// 256-token shared system prompt, 4096-token question.
    Short,
    /// `long` then `short`.
    Both,
    /// Router latency overhead with zero-latency engines.
    Overhead,
    /// Long run of mixed traffic with client aborts and engine faults against the router
    /// binary; fails on RSS growth, leaked counters or a panic (`docs/reliability.md`).
    Soak,
    /// Router CPU per request on ~100k-token chat prompts, unique and a growing conversation,
    /// read from the router binary's process (`docs/benchmarks.md`).
    PromptCost,
}

/// The clock of the policy scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Clock {
    /// Engines, router and client on one simulated clock that advances only when all of
    /// them wait (in-memory connections): the table depends on the seeds alone.
    Virtual,
    /// Wall-clock time over loopback TCP, engines `--time-scale` times faster than real time.
    Real,
}

/// Benchmarks kthena-router's routing policies on three simulated engines (Go Kthena's
/// published setup), or the router's latency overhead.
#[derive(Debug, Clone, Parser)]
#[command(name = "kthena-bench", version)]
struct Args {
    /// Scenario to run.
    #[arg(long, value_enum, default_value_t = Which::Long)]
    scenario: Which,
    /// Scaled-down run: 8 (long) or 4 (short) prompts per group instead of 32, and 2-second
    /// overhead points.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Folder for the PNG charts (`<scenario>.png`); created if missing.
    #[arg(long, default_value = "docs/benchmarks")]
    chart_dir: PathBuf,
    /// Do not draw charts.
    #[arg(long)]
    no_chart: bool,
    /// Clock of the `long` and `short` scenarios (the overhead and soak modes always run in
    /// real time, as do the `--peers` rows).
    #[arg(long, value_enum, default_value_t = Clock::Virtual)]
    clock: Clock,
    /// Real-time clock only: simulated engines run this many times faster than real time;
    /// every reported time is in model seconds (wall × time scale).
    #[arg(long, default_value_t = 4.0)]
    time_scale: f64,
    /// Engines behind the router.
    #[arg(long, default_value_t = 3)]
    engines: usize,
    /// KV-cache size of each engine, in blocks of 16 tokens. The default, 28,000 blocks
    /// (448,000 tokens), is what vLLM leaves for the KV cache of a 7B model (57,344 B/token) on
    /// a 48 GB GPU at `gpu_memory_utilization` 0.9; 62000 is the simulator's H100 profile.
    #[arg(long, default_value_t = BENCH_GPU_BLOCKS)]
    num_gpu_blocks: usize,
    /// Only these policies (comma separated names as in the report; `best` for the best
    /// combination, `direct` for the single-engine anchor).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Engines publish no KV events and the router subscribes to none, whatever the policy:
    /// `kvcache-aware` then learns only from the router's own routing decisions, as in
    /// cluster mode, which does not subscribe to KV events.
    #[arg(long)]
    no_kv_events: bool,
    /// Also run the peer routers in front of the same engines, each as its own process:
    /// `smg` (cache_aware, round_robin, random) and `vllm-router` (cache_aware, random,
    /// kv_aware), when installed. They run in real time: use with `--time-scale 1`. With
    /// `--policies` naming peer rows (`"smg random"`), only those.
    #[arg(long)]
    peers: bool,
    /// Extra policy: a file holding a `scheduler:` section (Kthena's format) or just its
    /// contents; named after the file stem. Repeatable.
    #[arg(long)]
    policy_file: Vec<PathBuf>,
    /// Seed of the workload text, its order and the arrivals (in virtual time also of the
    /// router's random draws); with `--seeds N`, the first of N consecutive seeds.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual clock only: runs per policy, with seeds `--seed`, `--seed`+1, ...; each row
    /// is the median with the range over the seeds, and a ratio whose range overlaps
    /// random's is marked `~` (not a real difference).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Virtual clock only: runs at the same time (each on its own thread and clock; the
    /// results do not depend on it) [default: the number of CPUs].
    #[arg(long)]
    jobs: Option<usize>,
    /// Override the number of groups (system prompts).
    #[arg(long)]
    num_groups: Option<usize>,
    /// Override the prompts per group.
    #[arg(long)]
    prompts_per_group: Option<usize>,
    /// Turns per chat session (follow-ups extend the conversation).
    #[arg(long, default_value_t = 1)]
    turns: usize,
    /// Override the max concurrency.
    #[arg(long)]
    max_concurrency: Option<usize>,
    /// Override the request rate (requests per model second; `inf` sends all at once).
    #[arg(long)]
    request_rate: Option<f64>,
    /// Virtual clock only: instead of the policy table, the `long` scenario's second half
    /// served by the router that served the first half, by a router started after it
    /// without replay, and by one with the engines' KV-event replay; prints the
    /// prefix-cache hit rates (first 10% of the second half, all of it) of each.
    #[arg(long)]
    late_router: bool,
    /// Hugging Face `tokenizer.json` for the engines and the workload (default: the
    /// simulator's built-in tokenizer).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Overhead mode: offered rates in requests per wall second, comma separated (each
    /// non-streaming and streaming).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1000.0, 3000.0, 5000.0])]
    rates: Vec<f64>,
    /// Overhead mode: only the contenders whose label starts with one of these (comma
    /// separated: `kthena-router`, `vllm-router`, `SGLang`, `nginx`, `Envoy`).
    #[arg(long, value_delimiter = ',')]
    proxies: Vec<String>,
    /// Internal: run as the overhead load generator with this JSON spec.
    #[arg(long, hide = true)]
    load_gen: Option<String>,
    /// Overhead mode: seconds per point [default: 5, or 2 with --quick].
    #[arg(long)]
    seconds: Option<f64>,
    /// Overhead mode: rounds; each starts every contender once and measures each point as one
    /// direct/proxy pair; every cell is the median over the rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    repeats: u16,
    /// Virtual clock only: router instances behind a round-robin front (session i goes to
    /// router i mod N), each subscribed to every engine's KV events; comma separated for
    /// several rows per policy (`1,3`) [default: 1].
    #[arg(long, value_delimiter = ',')]
    routers: Vec<usize>,
    /// With `--routers` above 1: whether the routers share their per-endpoint in-flight
    /// counts (an in-process board with Redis' semantics), or both rows.
    #[arg(long, value_enum, default_value_t = replicas::SharedInflight::On)]
    shared_inflight: replicas::SharedInflight,
    /// With `--shared-inflight`: the shortest time between two reads of the other routers'
    /// counts (Go duration; Go Kthena's Redis sync interval is 50ms; 0s: every decision).
    #[arg(long, default_value = "50ms", value_parser = kthena_router::parse_go_duration)]
    inflight_refresh: Duration,
    /// Soak mode: how long the load runs (Go duration: `30m`, `90s`).
    #[arg(long, default_value = "30m", value_parser = kthena_router::parse_go_duration)]
    duration: Duration,
    /// Soak mode: requests started per second.
    #[arg(long, default_value_t = 20.0)]
    soak_rate: f64,
    /// Soak mode: most requests in flight from the client.
    #[arg(long, default_value_t = 64)]
    soak_concurrency: usize,
    /// Soak mode: fraction (0..1) of requests abandoned at a random moment (0-150 ms).
    #[arg(long, default_value_t = 0.1)]
    abort_ratio: f64,
    /// Soak mode: the `kthena-router` binary [default: beside this executable].
    #[arg(long)]
    router_bin: Option<PathBuf>,
    /// Soak mode: folder for the router's config and log and `soak.json`.
    #[arg(long, default_value = "bench/out/soak")]
    out_dir: PathBuf,
    #[command(flatten)]
    prompt_cost: prompt_cost::Opts,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("warn,kthena_bench=info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(spec) = &args.load_gen {
        return loadgen::child_main(spec);
    }
    // Client, router and engines share this process: every routed request holds four of its
    // sockets. Raise the soft open-files limit to the hard one, as the router binary does.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!(error = %e, "Cannot raise the open-files limit");
    }
    if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        bail!("--time-scale must be a positive number");
    }
    if args.engines == 0 {
        bail!("--engines must be at least 1");
    }
    replicas::check(&args.routers, args.clock == Clock::Virtual, args.peers)?;
    let build = |name: &str, threads: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
    };
    let sims_rt = build("sims", 2)?;
    let router_rt = build("router", 2)?;
    let client_rt = build("client", 2)?;
    let rt = Runtimes {
        sims: sims_rt.handle().clone(),
        router: router_rt.handle().clone(),
    };
    let result = client_rt.block_on(run(&args, &rt));
    drop(client_rt);
    drop(router_rt);
    drop(sims_rt);
    result
}

async fn run(args: &Args, rt: &Runtimes) -> anyhow::Result<()> {
    if args.scenario == Which::Overhead {
        return run_overhead(args, rt).await;
    }
    if args.scenario == Which::Soak {
        return run_soak(args, rt).await;
    }
    if args.scenario == Which::PromptCost {
        return run_prompt_cost(args, rt).await;
    }
    if args.late_router {
        return run_late_router(args).await;
    }
    let scenarios = match args.scenario {
        Which::Long => vec![Scenario::long(args.quick, args.seed)],
        Which::Short => vec![Scenario::short(args.quick, args.seed)],
        _ => vec![
            Scenario::long(args.quick, args.seed),
            Scenario::short(args.quick, args.seed),
        ],
    };
    let tokenizer = match &args.tokenizer {
        Some(p) => kthena_sim::Tokenizer::from_file(p)?,
        None => kthena_sim::Tokenizer::fallback(),
    };
    let mut rows = Vec::new();
    for mut sc in scenarios {
        if let Some(v) = args.num_groups {
            sc.workload.num_groups = v;
        }
        if let Some(v) = args.prompts_per_group {
            sc.workload.prompts_per_group = v;
        }
        if let Some(v) = args.max_concurrency {
            sc.max_concurrency = v;
        }
        if let Some(v) = args.request_rate {
            sc.request_rate = v;
        }
        sc.workload.turns = args.turns.max(1);
        let started = tokio::time::Instant::now();
        let mut scenario_rows = run_scenario(args, rt, &sc, &tokenizer).await?;
        report::fill_ratios(&mut scenario_rows);
        tracing::info!(
            scenario = sc.name,
            wall_s = started.elapsed().as_secs_f64(),
            "Scenario done"
        );
        if !args.no_chart {
            std::fs::create_dir_all(&args.chart_dir)
                .with_context(|| format!("creating {}", args.chart_dir.display()))?;
            let path = args.chart_dir.join(format!("{}.png", sc.name));
            match kthena_bench::chart::draw_scenario(&path, &sc.name, &scenario_rows) {
                Ok(()) => eprintln!("chart: {}", path.display()),
                Err(e) => eprintln!("chart {} not drawn: {e}", path.display()),
            }
        }
        rows.extend(scenario_rows);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", report::markdown_table(&rows))?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `--late-router`: the long scenario (with the size overrides) in [`late_router`]'s three
/// variants, one run per seed each; prints the table.
async fn run_late_router(args: &Args) -> anyhow::Result<()> {
    let mut sc = Scenario::long(args.quick, args.seed);
    if let Some(v) = args.num_groups {
        sc.workload.num_groups = v;
    }
    if let Some(v) = args.prompts_per_group {
        sc.workload.prompts_per_group = v;
    }
    if let Some(v) = args.max_concurrency {
        sc.max_concurrency = v;
    }
    if let Some(v) = args.request_rate {
        sc.request_rate = v;
    }
    let tokenizer = match &args.tokenizer {
        Some(p) => kthena_sim::Tokenizer::from_file(p)?,
        None => kthena_sim::Tokenizer::fallback(),
    };
    let seeds: Vec<u64> = (0..args.seeds.max(1)).map(|i| args.seed + i).collect();
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let sim = sim_config(args, true);
    let engines = args.engines;
    let table = tokio::task::spawn_blocking(move || {
        late_router::run(&sc, &sim, engines, &seeds, &tokenizer, threads)
    })
    .await??;
    writeln!(std::io::stdout().lock(), "{table}")?;
    Ok(())
}

fn wanted(args: &Args, name: &str) -> bool {
    args.policies.is_empty()
        || args
            .policies
            .iter()
            .any(|p| p == name || (p == "best" && name == scenario::BEST))
}

async fn run_scenario(
    args: &Args,
    rt: &Runtimes,
    sc: &Scenario,
    tokenizer: &kthena_sim::Tokenizer,
) -> anyhow::Result<Vec<PolicyResult>> {
    let mut all = scenario::policies();
    for path in &args.policy_file {
        all.push(policy_from_file(path)?);
    }
    all.retain(|p| wanted(args, &p.name));
    let mut rows = Vec::new();
    if args.clock == Clock::Virtual {
        let tokenizer = tokenizer.clone();
        let (args2, sc2, all2) = (args.clone(), sc.clone(), all.clone());
        rows = tokio::task::spawn_blocking(move || {
            run_scenario_virtual(&args2, &sc2, &all2, &tokenizer)
        })
        .await??;
    }
    if args.clock == Clock::Real || args.peers {
        // The virtual runs generate a workload per seed; the real-time rows use `--seed`'s.
        let workload = Arc::new(Workload::generate(sc.workload, tokenizer));
        rows.extend(run_real_rows(args, rt, sc, &all, &workload).await?);
    }
    Ok(rows)
}

/// The real-time rows: every policy and the direct anchor with `--clock real`, and the
/// peers (with, beside virtual rows, a real-time random row as their baseline).
async fn run_real_rows(
    args: &Args,
    rt: &Runtimes,
    sc: &Scenario,
    policies: &[Policy],
    workload: &Arc<Workload>,
) -> anyhow::Result<Vec<PolicyResult>> {
    let mut rows = Vec::new();
    if args.clock == Clock::Real {
        for policy in policies {
            rows.push(run_policy_real(args, rt, sc, workload, policy).await?);
        }
        if wanted(args, "direct") {
            rows.push(run_direct(args, rt, sc, workload).await?);
        }
    }
    if args.peers {
        if args.clock == Clock::Virtual {
            // The peers' ratios are to a random row measured as they are: in real time.
            let random = scenario::policies().swap_remove(0);
            rows.push(run_policy_real(args, rt, sc, workload, &random).await?);
        }
        rows.extend(run_peers(args, rt, sc, workload).await?);
    }
    Ok(rows)
}

/// Every policy (and the direct anchor) of `sc` under each seed, in virtual time, on
/// `--jobs` threads; one row per policy, the median over its seeds.
fn run_scenario_virtual(
    args: &Args,
    sc: &Scenario,
    policies: &[Policy],
    tokenizer: &kthena_sim::Tokenizer,
) -> anyhow::Result<Vec<PolicyResult>> {
    let seeds: Vec<u64> = (0..args.seeds.max(1)).map(|i| args.seed + i).collect();
    let variants = replicas::expand(
        policies,
        &args.routers,
        args.shared_inflight,
        args.inflight_refresh,
    );
    let mut names: Vec<String> = variants.iter().map(|(p, _)| p.name.clone()).collect();
    let n = args.engines;
    if wanted(args, "direct") {
        names.push(format!("direct (1 engine, 1/{n} of the load)"));
    }
    let mut jobs = Vec::new();
    for &seed in &seeds {
        let mut spec = sc.workload;
        spec.seed = seed;
        let workload = Arc::new(Workload::generate(spec, tokenizer));
        for (policy, replicas) in &variants {
            let run = vtime::Run {
                engines: n,
                sim: sim_config(args, kv_events(args, policy)),
                router: Some((policy.scheduler_yaml.clone(), kv_events(args, policy))),
                seed,
                arrivals: poisson_arrivals(workload.sessions.len(), sc.request_rate, seed),
                max_concurrency: sc.max_concurrency,
                replicas: *replicas,
            };
            jobs.push((run, Arc::clone(&workload)));
        }
        if names.len() > variants.len() {
            let share = Arc::new(
                Workload::clone(&workload).with_groups(sc.workload.num_groups.div_ceil(n)),
            );
            let run = vtime::Run {
                engines: 1,
                sim: sim_config(args, false),
                router: None,
                seed,
                arrivals: poisson_arrivals(share.sessions.len(), sc.request_rate / n as f64, seed),
                max_concurrency: sc.max_concurrency.div_ceil(n),
                replicas: replicas::Replicas::ONE,
            };
            jobs.push((run, share));
        }
    }
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let per_seed = names.len();
    let started = tokio::time::Instant::now();
    let done = |i: usize, out: &anyhow::Result<vtime::Outcome>| {
        let (name, seed) = (&names[i % per_seed], seeds[i / per_seed]);
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
        let mut row = out?.row(&sc.name, &names[i % per_seed]);
        row.clock = "virtual".to_owned();
        runs[i % per_seed].push(row);
    }
    Ok(runs
        .iter()
        .filter_map(|r| PolicyResult::over_seeds(r, &seeds))
        .collect())
}

/// The peer rows (`--peers`), on the same engines, workload and arrivals as our policies.
async fn run_peers(
    args: &Args,
    rt: &Runtimes,
    sc: &Scenario,
    workload: &Arc<Workload>,
) -> anyhow::Result<Vec<PolicyResult>> {
    let mut args = args.clone();
    args.time_scale = real_time_scale(&args);
    let args = &args;
    let all = peer_policy::PeerPolicy::ALL;
    let named = args
        .policies
        .iter()
        .any(|p| all.iter().any(|pp| pp.name() == *p));
    let setup = peer_policy::Setup {
        rt,
        engines: args.engines,
        sim: sim_config(args, false),
        arrivals: arrivals(args, sc, workload.sessions.len()),
        max_concurrency: sc.max_concurrency,
        time_scale: args.time_scale,
    };
    let mut rows = Vec::new();
    for pp in all {
        if named && !wanted(args, &pp.name()) {
            continue;
        }
        if let Some(row) = peer_policy::run(&setup, &sc.name, workload, pp).await? {
            rows.push(row);
        }
    }
    Ok(rows)
}

/// A policy from a file with a `scheduler:` section (or only its contents).
fn policy_from_file(path: &std::path::Path) -> anyhow::Result<Policy> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let section = match kthena_router::Config::from_yaml(path, &text) {
        Ok(cfg) if text.contains("scheduler:") => cfg.scheduler,
        _ => {
            let wrapped = format!("scheduler:\n{}", indent(&text));
            kthena_router::Config::from_yaml(path, &wrapped)?.scheduler
        }
    };
    kthena_router::sched::build_scheduler(&section)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let needs_kv_events = section
        .plugins
        .score
        .enabled
        .iter()
        .any(|p| p.name == "kvcache-aware");
    let name = path
        .file_stem()
        .map_or_else(|| "custom".to_owned(), |s| s.to_string_lossy().into_owned());
    Ok(Policy {
        name,
        scheduler_yaml: format!("  {}\n", serde_json::to_string(&section)?),
        needs_kv_events,
    })
}

/// Whether `policy`'s engines publish KV events and the router reads them.
fn kv_events(args: &Args, policy: &Policy) -> bool {
    policy.needs_kv_events && !args.no_kv_events
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn sim_config(args: &Args, kv_events: bool) -> kthena_sim::Config {
    let mut cfg = kthena_sim::Config::default()
        .with_model(MODEL)
        .with_time_scale(args.time_scale);
    cfg.tokenizer.clone_from(&args.tokenizer);
    cfg.profile.num_gpu_blocks = args.num_gpu_blocks;
    if kv_events {
        cfg.kv_events_port = Some(0);
    }
    cfg
}

fn progress(len: usize, label: String) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>42} [{bar:30}] {pos}/{len} {elapsed} eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(label);
    pb
}

/// Arrival times in wall seconds: the scenario's rate is per model second.
fn arrivals(args: &Args, sc: &Scenario, n: usize) -> Vec<f64> {
    poisson_arrivals(n, sc.request_rate * args.time_scale, args.seed)
}

/// The time scale of real-time runs: `--time-scale`, or 1 beside virtual-time rows (the
/// peers' and their random baseline's).
fn real_time_scale(args: &Args) -> f64 {
    if args.clock == Clock::Virtual {
        1.0
    } else {
        args.time_scale
    }
}

/// One policy in real time over loopback TCP.
async fn run_policy_real(
    args: &Args,
    rt: &Runtimes,
    sc: &Scenario,
    workload: &Arc<Workload>,
    policy: &Policy,
) -> anyhow::Result<PolicyResult> {
    let mut args = args.clone();
    args.time_scale = real_time_scale(&args);
    let args = &args;
    let sims =
        harness::start_sims(rt, args.engines, sim_config(args, kv_events(args, policy))).await?;
    // Scrape as often in model time as Go Kthena's default 1 s in real time.
    let scrape = Duration::from_secs_f64((1.0 / args.time_scale).max(0.01));
    let router = match harness::start_router(
        rt,
        &sims,
        &policy.scheduler_yaml,
        scrape,
        kv_events(args, policy),
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
            arrivals: arrivals(args, sc, workload.sessions.len()),
            max_concurrency: sc.max_concurrency,
            time_scale: args.time_scale,
        };
        let pb = progress(
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
            wall.as_secs_f64() * args.time_scale,
            &counters,
        ))
    }
    .await;
    harness::stop_router(rt, router).await;
    harness::stop_sims(rt, sims).await;
    result
}

/// The anchor: one engine, no router, sent the share of one engine under perfect affinity
/// (the first `groups / engines` groups, `1 / engines` of the concurrency and rate).
async fn run_direct(
    args: &Args,
    rt: &Runtimes,
    sc: &Scenario,
    workload: &Arc<Workload>,
) -> anyhow::Result<PolicyResult> {
    let n = args.engines;
    let groups = sc.workload.num_groups.div_ceil(n);
    let share = Arc::new(Workload::clone(workload).with_groups(groups));
    let name = format!("direct (1 engine, 1/{n} of the load)");
    let sims = harness::start_sims(rt, 1, sim_config(args, false)).await?;
    let client = harness::http_client();
    let result = async {
        let load = Load {
            targets: vec![sims[0].base_url()],
            arrivals: poisson_arrivals(
                share.sessions.len(),
                sc.request_rate * args.time_scale / n as f64,
                args.seed,
            ),
            max_concurrency: sc.max_concurrency.div_ceil(n),
            time_scale: args.time_scale,
        };
        let pb = progress(
            share.num_requests(),
            format!("{} direct (1 engine)", sc.name),
        );
        let (samples, wall) = harness::drive(&client, &share, &load, &pb).await;
        pb.finish();
        let counters = vec![harness::engine_counters(&client, &sims[0].base_url()).await?];
        Ok::<_, anyhow::Error>(PolicyResult::from_samples(
            &sc.name,
            &name,
            &samples,
            wall.as_secs_f64() * args.time_scale,
            &counters,
        ))
    }
    .await;
    harness::stop_sims(rt, sims).await;
    result
}

async fn run_overhead(args: &Args, rt: &Runtimes) -> anyhow::Result<()> {
    let seconds = args.seconds.unwrap_or(if args.quick { 2.0 } else { 5.0 });
    let points = overhead::points(&args.rates);
    let load = overhead::Load {
        seconds,
        repeats: usize::from(args.repeats),
    };
    let rows = overhead::run(rt, &points, load, &args.proxies).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", overhead::table(&rows))?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn run_prompt_cost(args: &Args, rt: &Runtimes) -> anyhow::Result<()> {
    let setup = prompt_cost::Setup {
        router_bin: (args.router_bin.clone()).unwrap_or_else(soak_run::default_router_bin),
        baseline_bin: std::env::var_os("KTHENA_ROUTER_BASELINE_BIN").map(PathBuf::from),
        tokenizer: (args.tokenizer.clone()).unwrap_or_else(prompt_cost::default_tokenizer),
        seed: args.seed,
    };
    let report = prompt_cost::run(rt, &args.prompt_cost, &setup).await?;
    writeln!(std::io::stdout().lock(), "{}", report.markdown())?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn run_soak(args: &Args, rt: &Runtimes) -> anyhow::Result<()> {
    if !(args.soak_rate > 0.0 && (0.0..=1.0).contains(&args.abort_ratio)) {
        bail!("--soak-rate must be positive and --abort-ratio within 0..1");
    }
    let opts = soak_run::SoakOpts {
        duration: args.duration,
        rate: args.soak_rate,
        concurrency: args.soak_concurrency,
        abort_ratio: args.abort_ratio,
        router_bin: args
            .router_bin
            .clone()
            .unwrap_or_else(soak_run::default_router_bin),
        out_dir: args.out_dir.clone(),
        seed: args.seed,
    };
    let run = soak_run::run(rt, &opts).await?;
    let chart = (!args.no_chart).then(|| args.chart_dir.join("soak.png"));
    soak_run::save(&run, &opts.out_dir, chart.as_deref())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", run.markdown())?;
    for line in &run.faults {
        writeln!(out, "- {line}")?;
    }
    let failures = run.failures();
    if !failures.is_empty() {
        bail!("soak failed: {}", failures.join("; "));
    }
    Ok(())
}
