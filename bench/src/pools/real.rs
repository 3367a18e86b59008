//! The real-time rows of a pool scenario (`--peers`): our router's `random` on the pool as
//! the peers' baseline, then every installed peer that can serve the pool, each in front of
//! fresh engines of the pool at time scale 1 (`docs/benchmarks.md`, "Against the peer
//! routers"). An aggregated pool gets the peers' usual rows; a P/D pool gets vllm-router's
//! vLLM P/D mode ([`PeerPolicy::PD`]).

use std::sync::Arc;
use std::time::Duration;

use kthena_bench::pool::{Pool, PoolScenario};
use kthena_bench::report::PolicyResult;
use kthena_bench::scenario::{self, Policy};
use kthena_bench::workload::Workload;

use crate::harness::{self, Load, Runtimes};
use crate::peer_policy::{self, PeerPolicy};
use crate::{Args, Clock};

/// Our `random` row and the peers' rows, in real time.
///
/// # Errors
/// Engines, router or a peer cannot start, or an engine's counters cannot be read.
pub(crate) async fn rows(
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
