//! `kthena-bench`: replays Go Kthena's published routing benchmark on simulated engines, and
//! measures the router's overhead. See `docs/benchmarks.md`.

mod harness;
mod late_router;
mod loadgen;
mod overhead;
mod peer_policy;
mod peers;
mod pools;
mod prompt_cost;
mod replicas;
mod soak_run;
mod vtime;
mod zoo;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use kthena_bench::scenario::{self, BENCH_GPU_BLOCKS, Policy, Scenario};
use tracing_subscriber::EnvFilter;

use crate::harness::{MODEL, Runtimes};

/// The `--scenario` value of the overhead measurement.
const OVERHEAD: &str = "overhead";
/// The `--scenario` value of the soak.
const SOAK: &str = "soak";
/// The `--scenario` value of the prompt-cost measurement.
const PROMPT_COST: &str = "prompt-cost";

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
    /// Scenario to run: a policy scenario of the zoo (`long`, `short`, `both`, `agent`,
    /// `zipf`, `saturation`; `docs/benchmarks.md`, `docs/workload-zoo.md`), an engine-pool
    /// scenario (`wide8`, `wide16`, `hetero`, `pd`), `overhead` (router latency overhead
    /// with zero-latency engines) or `soak` (a long run of mixed traffic with client aborts
    /// and engine faults against the router binary, `docs/reliability.md`).
    #[arg(long, default_value = "long", value_parser = clap::builder::PossibleValuesParser::new(zoo::names()))]
    scenario: String,
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
    match args.scenario.as_str() {
        OVERHEAD => return run_overhead(args, rt).await,
        SOAK => return run_soak(args, rt).await,
        PROMPT_COST => return run_prompt_cost(args, rt).await,
        _ => {}
    }
    if args.late_router {
        return run_late_router(args).await;
    }
    if let Some(ps) = pools::scenario_of(args) {
        return pools::run(args, rt, ps).await;
    }
    zoo::run(args, rt).await
}

/// `--late-router`: the long scenario (with the size overrides) in [`late_router`]'s three
/// variants, one run per seed each; prints the table.
async fn run_late_router(args: &Args) -> anyhow::Result<()> {
    let mut sc = Scenario::long(args.quick, args.seed);
    apply_overrides(args, &mut sc);
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
    sc.arrivals(n, sc.request_rate * args.time_scale, args.seed)
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

/// The size and load overrides of the command line (`--num-groups`, `--prompts-per-group`
/// and `--turns` reshape SGLang's shared-prefix workload only).
pub(crate) fn apply_overrides(args: &Args, sc: &mut Scenario) {
    if sc.shape == kthena_bench::shapes::Shape::SharedPrefix {
        if let Some(v) = args.num_groups {
            sc.workload.num_groups = v;
        }
        if let Some(v) = args.prompts_per_group {
            sc.workload.prompts_per_group = v;
        }
        sc.workload.turns = args.turns.max(1);
    }
    if let Some(v) = args.max_concurrency {
        sc.max_concurrency = v;
    }
    if let Some(v) = args.request_rate {
        sc.request_rate = v;
    }
}
