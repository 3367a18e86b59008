//! The virtual-time rows of a scenario: every policy (and the direct anchor) under each
//! seed, on `--jobs` threads ([`vtime`]).

use std::sync::Arc;

use kthena_bench::report::PolicyResult;
use kthena_bench::scenario::{DirectShare, Policy, Scenario};

use crate::{Args, kv_events, replicas, sim_config, vtime, wanted};

/// Every policy (and the direct anchor) of `sc` under each seed, in virtual time, on
/// `--jobs` threads; one row per policy, the median over its seeds.
pub(super) fn run_scenario_virtual(
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
    if wanted(args, "direct") && sc.direct != DirectShare::None {
        names.push(format!("direct (1 engine, 1/{n} of the load)"));
    }
    let mut jobs = Vec::new();
    for &seed in &seeds {
        let workload = Arc::new(sc.generate(seed, tokenizer));
        for (policy, replicas) in &variants {
            let run = vtime::Run {
                engines: n,
                sim: sim_config(args, kv_events(args, policy)),
                router: Some((policy.scheduler_yaml.clone(), kv_events(args, policy))),
                seed,
                arrivals: sc.arrivals(workload.sessions.len(), sc.request_rate, seed),
                max_concurrency: sc.max_concurrency,
                replicas: *replicas,
                timeout_s: sc.timeout_s,
                pool: None,
            };
            jobs.push((run, Arc::clone(&workload)));
        }
        if names.len() > variants.len()
            && let Some(share) = sc.direct_share(&workload, n)
        {
            let share = Arc::new(share);
            let run = vtime::Run {
                engines: 1,
                sim: sim_config(args, false),
                router: None,
                seed,
                arrivals: sc.arrivals(share.sessions.len(), sc.request_rate / n as f64, seed),
                max_concurrency: sc.max_concurrency.div_ceil(n),
                replicas: replicas::Replicas::ONE,
                timeout_s: sc.timeout_s,
                pool: None,
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
        let out = out?;
        let mut row = out.row(&sc.name, &names[i % per_seed]);
        if let Some(slo) = sc.slo_ttft_s {
            row = row.with_slo(&out.samples, slo);
        }
        row.clock = "virtual".to_owned();
        runs[i % per_seed].push(row);
    }
    Ok(runs
        .iter()
        .filter_map(|r| PolicyResult::over_seeds(r, &seeds))
        .collect())
}
