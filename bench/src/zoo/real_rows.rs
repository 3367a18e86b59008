//! The real-time rows of a scenario: our policies with `--clock real`, the direct anchor,
//! and the peer routers (`--peers`) with a real-time `random` row as their baseline.

use std::sync::Arc;
use std::time::Duration;

use kthena_bench::report::{PolicyResult, Sample};
use kthena_bench::scenario::{self, DirectShare, Policy, Scenario};
use kthena_bench::workload::Workload;

use super::virtual_rows;
use crate::harness::{self, Load, Runtimes};
use crate::{
    Args, Clock, arrivals, kv_events, peer_policy, progress, real_time_scale, sim_config, wanted,
};

/// The client's deadline per request in wall time (the scenario's is in model seconds).
fn timeout(args: &Args, sc: &Scenario) -> Option<Duration> {
    sc.timeout_s
        .map(|t| Duration::from_secs_f64(t / real_time_scale(args)))
}

/// `row` with the share within the scenario's TTFT objective, when it has one.
fn with_slo(row: PolicyResult, sc: &Scenario, samples: &[Sample]) -> PolicyResult {
    match sc.slo_ttft_s {
        Some(slo) => row.with_slo(samples, slo),
        None => row,
    }
}

pub(super) async fn run_scenario(
    args: &Args,
    rt: &Runtimes,
    sc: &Scenario,
    tokenizer: &kthena_sim::Tokenizer,
) -> anyhow::Result<Vec<PolicyResult>> {
    let mut all = scenario::policies();
    for path in &args.policy_file {
        all.push(crate::policy_from_file(path)?);
    }
    all.retain(|p| wanted(args, &p.name));
    let mut rows = Vec::new();
    if args.clock == Clock::Virtual {
        let tokenizer = tokenizer.clone();
        let (args2, sc2, all2) = (args.clone(), sc.clone(), all.clone());
        rows = tokio::task::spawn_blocking(move || {
            virtual_rows::run_scenario_virtual(&args2, &sc2, &all2, &tokenizer)
        })
        .await??;
    }
    if args.clock == Clock::Real || args.peers {
        // The virtual runs generate a workload per seed; the real-time rows use `--seed`'s.
        let workload = Arc::new(sc.generate(args.seed, tokenizer));
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
        if wanted(args, "direct") && sc.direct != DirectShare::None {
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
        timeout_s: sc.timeout_s,
        slo_ttft_s: sc.slo_ttft_s,
        pool: None,
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
            timeout: timeout(args, sc),
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
        let row = PolicyResult::from_samples(
            &sc.name,
            &policy.name,
            &samples,
            wall.as_secs_f64() * args.time_scale,
            &counters,
        );
        Ok::<_, anyhow::Error>(with_slo(row, sc, &samples))
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
    let Some(share) = sc.direct_share(workload, n) else {
        anyhow::bail!("scenario {} has no direct anchor", sc.name);
    };
    let share = Arc::new(share);
    let name = format!("direct (1 engine, 1/{n} of the load)");
    let sims = harness::start_sims(rt, 1, sim_config(args, false)).await?;
    let client = harness::http_client();
    let result = async {
        let load = Load {
            targets: vec![sims[0].base_url()],
            arrivals: sc.arrivals(
                share.sessions.len(),
                sc.request_rate * args.time_scale / n as f64,
                args.seed,
            ),
            max_concurrency: sc.max_concurrency.div_ceil(n),
            time_scale: args.time_scale,
            timeout: timeout(args, sc),
        };
        let pb = progress(
            share.num_requests(),
            format!("{} direct (1 engine)", sc.name),
        );
        let (samples, wall) = harness::drive(&client, &share, &load, &pb).await;
        pb.finish();
        let counters = vec![harness::engine_counters(&client, &sims[0].base_url()).await?];
        let row = PolicyResult::from_samples(
            &sc.name,
            &name,
            &samples,
            wall.as_secs_f64() * args.time_scale,
            &counters,
        );
        Ok::<_, anyhow::Error>(with_slo(row, sc, &samples))
    }
    .await;
    harness::stop_sims(rt, sims).await;
    result
}
