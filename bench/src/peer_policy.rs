//! The peers' routing policies as rows of the `long` and `short` tables (`--peers`).
//!
//! Each row starts fresh engines (cold caches, zeroed counters, the same configuration as
//! for our policies), puts the peer in front of them as its own process ([`peers`]), sends
//! the scenario's workload through it with the same open-loop client as our rows, and reads
//! the same engine counters. Only the router differs: the SGLang Model Gateway (`smg`,
//! PyPI) with `cache_aware`, `round_robin` and `random`, and vllm-router (PyPI) with
//! `cache_aware`, `random` and `kv_aware` (which subscribes to the engines' KV events). A
//! peer that is not installed is skipped with a line on stderr.
//!
//! Peers run in real time: their own timers and queues know nothing of the engines' time
//! scale, so `docs/benchmarks.md` runs these tables at `--time-scale 1`.

use std::sync::Arc;
use std::time::Duration;

use kthena_bench::report::{EngineCounters, PolicyResult};
use kthena_bench::workload::Workload;
use kthena_sim::{Role, SimHandle};

use crate::harness::{self, HttpClient, Load, Runtimes};
use crate::peers::{self, Peer};
use kthena_bench::pool::Pool;

/// One peer router with one of its policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerPolicy {
    /// The router program.
    peer: Peer,
    /// Its `--policy` value.
    policy: &'static str,
    /// vllm-router's vLLM P/D mode over the pool's prefill and decode engines.
    pd: bool,
}

impl PeerPolicy {
    /// Every peer row, in table order.
    pub(crate) const ALL: [Self; 6] = [
        Self::new(Peer::Smg, "cache_aware"),
        Self::new(Peer::Smg, "round_robin"),
        Self::new(Peer::Smg, "random"),
        Self::new(Peer::VllmRouter, "cache_aware"),
        Self::new(Peer::VllmRouter, "random"),
        Self::new(Peer::VllmRouter, "kv_aware"),
    ];

    /// The rows of a P/D pool: vllm-router's vLLM P/D mode (`--vllm-pd-disaggregation`),
    /// the same policy for the prefill and the decode pick.
    pub(crate) const PD: [Self; 4] = [
        Self::pd(Peer::VllmRouter, "random"),
        Self::pd(Peer::VllmRouter, "round_robin"),
        Self::pd(Peer::VllmRouter, "power_of_two"),
        Self::pd(Peer::VllmRouter, "cache_aware"),
    ];

    const fn new(peer: Peer, policy: &'static str) -> Self {
        Self {
            peer,
            policy,
            pd: false,
        }
    }

    const fn pd(peer: Peer, policy: &'static str) -> Self {
        Self {
            peer,
            policy,
            pd: true,
        }
    }

    /// The row name: program and policy, e.g. `smg cache_aware`.
    pub(crate) fn name(self) -> String {
        let program = match self.peer {
            Peer::Smg => "smg",
            _ => "vllm-router",
        };
        let mode = if self.pd { " P/D" } else { "" };
        format!("{program}{mode} {}", self.policy)
    }

    /// Whether the engines must publish KV events (vllm-router's `kv_aware`).
    pub(crate) fn needs_kv_events(self) -> bool {
        self.policy == "kv_aware"
    }
}

/// What every row of a scenario shares with our policies' rows.
#[derive(Debug)]
pub(crate) struct Setup<'a> {
    /// Runtimes of the engines.
    pub(crate) rt: &'a Runtimes,
    /// Engines per row.
    pub(crate) engines: usize,
    /// The engines' configuration without KV events (they are added for `kv_aware`).
    pub(crate) sim: kthena_sim::Config,
    /// Arrival times of the sessions, wall seconds.
    pub(crate) arrivals: Vec<f64>,
    /// Most requests in flight.
    pub(crate) max_concurrency: usize,
    /// Model seconds per wall second.
    pub(crate) time_scale: f64,
    /// The client's deadline per request, model seconds (`None`: none).
    pub(crate) timeout_s: Option<f64>,
    /// The scenario's TTFT objective, model seconds ([`PolicyResult::with_slo`]).
    pub(crate) slo_ttft_s: Option<f64>,
    /// The engines' profiles and roles when they are not `engines` copies of `sim`.
    pub(crate) pool: Option<Arc<Pool>>,
}

/// Runs one peer row of `scenario`; `None` when the peer is not installed.
///
/// # Errors
/// The engines or the peer cannot start, or an engine's counters cannot be read.
pub(crate) async fn run(
    setup: &Setup<'_>,
    scenario: &str,
    workload: &Arc<Workload>,
    pp: PeerPolicy,
) -> anyhow::Result<Option<PolicyResult>> {
    let Some(program) = pp.peer.program() else {
        tracing::warn!(peer = %pp.name(), "not installed, skipped");
        return Ok(None);
    };
    let mut sim = setup.sim.clone();
    if pp.needs_kv_events() {
        sim.kv_events_port = Some(0);
        // vLLM's default topic; vllm-router's static sources see no other (`docs/benchmarks.md`).
        sim.kv_events_topic = Some(String::new());
    }
    let sims = match &setup.pool {
        Some(pool) => harness::start_pool_sims(setup.rt, pool, &sim).await?,
        None => harness::start_sims(setup.rt, setup.engines, sim).await?,
    };
    let client = harness::http_client();
    let result = async {
        let running = if pp.pd {
            let (prefill, decode) = split_roles(setup.pool.as_deref(), &sims);
            peers::start_vllm_pd(&program, (&prefill, &decode), &client, pp.policy).await?
        } else {
            peers::start_with_policy(pp.peer, &program, &sims, &client, Some(pp.policy)).await?
        };
        // The readiness probe went through the engines: count from here.
        let before = counters(&client, &sims).await?;
        let load = Load {
            targets: vec![running.url.clone()],
            arrivals: setup.arrivals.clone(),
            max_concurrency: setup.max_concurrency,
            time_scale: setup.time_scale,
            timeout: setup
                .timeout_s
                .map(|t| Duration::from_secs_f64(t / setup.time_scale)),
        };
        let pb = crate::progress(workload.num_requests(), format!("{scenario} {}", pp.name()));
        let (samples, wall) = harness::drive(&client, workload, &load, &pb).await;
        pb.finish();
        let after = counters(&client, &sims).await?;
        drop(running);
        let engines: Vec<EngineCounters> = after
            .iter()
            .zip(&before)
            .map(|(a, b)| since(*a, *b))
            .collect();
        let row = PolicyResult::from_samples(
            scenario,
            &pp.name(),
            &samples,
            wall.as_secs_f64() * setup.time_scale,
            &engines,
        );
        Ok::<_, anyhow::Error>(match setup.slo_ttft_s {
            Some(slo) => row.with_slo(&samples, slo),
            None => row,
        })
    }
    .await;
    harness::stop_sims(setup.rt, sims).await;
    // Let the peer's sockets close before the next row binds new ones.
    tokio::time::sleep(Duration::from_millis(200)).await;
    result.map(Some)
}

/// The base URLs of the prefill and of the decode engines of a P/D pool.
fn split_roles(pool: Option<&Pool>, sims: &[SimHandle]) -> (Vec<String>, Vec<String>) {
    let role = |i: usize| pool.and_then(|p| p.engines.get(i)).map(|e| e.role);
    let pick = |want: Role| {
        sims.iter()
            .enumerate()
            .filter(|(i, _)| role(*i) == Some(want))
            .map(|(_, s)| s.base_url())
            .collect()
    };
    (pick(Role::Prefill), pick(Role::Decode))
}

async fn counters(client: &HttpClient, sims: &[SimHandle]) -> anyhow::Result<Vec<EngineCounters>> {
    let mut out = Vec::with_capacity(sims.len());
    for s in sims {
        out.push(harness::engine_counters(client, &s.base_url()).await?);
    }
    Ok(out)
}

/// The counts between two readings of the same engine.
fn since(after: EngineCounters, before: EngineCounters) -> EngineCounters {
    EngineCounters {
        requests: after.requests.saturating_sub(before.requests),
        prefix_queries: after.prefix_queries.saturating_sub(before.prefix_queries),
        prefix_hits: after.prefix_hits.saturating_sub(before.prefix_hits),
        preemptions: after.preemptions.saturating_sub(before.preemptions),
    }
}

#[cfg(test)]
mod tests;
