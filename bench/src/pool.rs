//! The engine-topology scenarios (`wide8`, `wide16`, `hetero`, `pd`): engine pools that are
//! not three identical aggregated engines, the `long` workload scaled to them, and the
//! direct runs their ceiling is made of (`docs/workload-zoo.md`, "Engine pools").
//!
//! A [`Pool`] lists its engines with their own cost profile (a heterogeneous pool) and P/D
//! role (a disaggregated pool behind a `pdGroup` ModelServer); the benchmark's runners start
//! engine `i` with [`Pool::engine_config`] and label its endpoint with
//! [`Pool::endpoint_labels`].

use kthena_sim::{Profile, Role};

use crate::scenario::Scenario;

/// One engine of a pool.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSpec {
    /// Its cost profile; `None`: the run's common profile (`--num-gpu-blocks` and the
    /// simulator's defaults).
    pub profile: Option<Profile>,
    /// Its P/D role (`Role::Both` in an aggregated pool).
    pub role: Role,
}

/// The engines of one run and how the router sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// The engines, in endpoint order (`engine-0`, `engine-1`, ...).
    pub engines: Vec<EngineSpec>,
    /// Whether the ModelServer is P/D disaggregated: `pdGroup` over the endpoints' `role`
    /// labels, all in one group, with the `nixl` connector (the vLLM protocol kthena-sim's
    /// prefill and decode engines speak, `docs/pd.md`).
    pub pd: bool,
}

/// The group every P/D endpoint of a pool belongs to (the `group` label).
const PD_GROUP: &str = "g0";

impl Pool {
    /// `n` engines of the common profile, aggregated.
    #[must_use]
    pub fn uniform(n: usize) -> Self {
        Self::of(vec![(None, Role::Both); n], false)
    }

    fn of(engines: Vec<(Option<Profile>, Role)>, pd: bool) -> Self {
        Self {
            engines: engines
                .into_iter()
                .map(|(profile, role)| EngineSpec { profile, role })
                .collect(),
            pd,
        }
    }

    /// The configuration of engine `i`: `base` with the engine's profile and role.
    #[must_use]
    pub fn engine_config(&self, i: usize, base: &kthena_sim::Config) -> kthena_sim::Config {
        let mut cfg = base.clone();
        if let Some(spec) = self.engines.get(i) {
            if let Some(p) = &spec.profile {
                cfg.profile = p.clone();
            }
            cfg.role = spec.role;
        }
        cfg
    }

    /// Extra standalone endpoint labels of engine `i` (YAML flow-map entries to append after
    /// `app: bench`): `, group: g0, role: prefill|decode` in a P/D pool, nothing otherwise.
    #[must_use]
    pub fn endpoint_labels(&self, i: usize) -> String {
        if !self.pd {
            return String::new();
        }
        let role = match self.engines.get(i).map(|e| e.role) {
            Some(Role::Prefill) => "prefill",
            Some(Role::Decode) => "decode",
            _ => "both",
        };
        format!(", group: {PD_GROUP}, role: {role}")
    }

    /// What a P/D pool adds to the ModelServer: the `pdGroup` entry of `workloadSelector`
    /// (a line to append after `matchLabels`, indented four spaces) and the `kvConnector`
    /// line of `spec` (indented two spaces, ending in a newline); two empty strings for an
    /// aggregated pool.
    #[must_use]
    pub fn model_server_extra(&self) -> (&'static str, &'static str) {
        if self.pd {
            (
                "\n    pdGroup: {groupKey: group, prefillLabels: {role: prefill}, decodeLabels: {role: decode}}",
                "  kvConnector: {type: nixl}\n",
            )
        } else {
            ("", "")
        }
    }
}

/// A direct run (one engine, no router) that the ceiling of a pool scenario is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct Direct {
    /// The row name.
    pub name: String,
    /// The engine's profile (`None`: the common one).
    pub profile: Option<Profile>,
    /// How many engines of the pool it stands for: the ceiling adds its throughput this
    /// many times.
    pub count: usize,
    /// It gets `1/share` of the scenario's load: the first `num_groups / share` groups
    /// (rounded up), `1/share` of the rate and of the concurrency (rounded up).
    pub share: usize,
}

/// A pool scenario: the workload, the pool our policies route over, the direct runs of its
/// ceiling and, for a P/D pool, the aggregated pool of the same engines it is compared with.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolScenario {
    /// The workload and its load settings (`name` is the scenario's name).
    pub scenario: Scenario,
    /// The engines our policies and the peers route over.
    pub pool: Pool,
    /// The direct runs; empty when the scenario has no ceiling.
    pub directs: Vec<Direct>,
    /// The same engines aggregated (P/D scenario only): its rows are named
    /// `aggregated: <policy>`.
    pub aggregated: Option<Pool>,
}

/// The `long` scenario's 3-engine load per engine, scaled to `n` engines: `256 · n / 3`
/// groups (rounded), rate `800 · n / 3` per second, concurrency `100 · n`; every
/// per-request parameter (and `prompts_per_group`) is `long`'s.
#[must_use]
pub fn scaled_long(name: &str, n: usize, quick: bool, seed: u64) -> Scenario {
    let mut sc = Scenario::long(quick, seed);
    let f = n as f64 / 3.0;
    sc.name = name.to_owned();
    sc.workload.num_groups = (sc.workload.num_groups as f64 * f).round() as usize;
    sc.request_rate *= f;
    sc.max_concurrency = (sc.max_concurrency as f64 * f).round() as usize;
    sc
}

/// `wide8`/`wide16`: `n` identical engines under [`scaled_long`]; ceiling: direct × `n`.
#[must_use]
pub fn wide(n: usize, quick: bool, seed: u64) -> PoolScenario {
    PoolScenario {
        scenario: scaled_long(&format!("wide{n}"), n, quick, seed),
        pool: Pool::uniform(n),
        directs: vec![Direct {
            name: format!("direct (1 engine, 1/{n} of the load)"),
            profile: None,
            count: n,
            share: n,
        }],
        aggregated: None,
    }
}

/// The fast engines of `hetero`: the default (H100) speeds with `blocks` KV blocks.
#[must_use]
pub fn fast_profile(blocks: usize) -> Profile {
    Profile {
        num_gpu_blocks: blocks,
        ..Profile::default()
    }
}

/// The slow engines of `hetero`: [`Profile::l40s`] speeds and batch limits with half of
/// `blocks`.
#[must_use]
pub fn slow_profile(blocks: usize) -> Profile {
    Profile {
        num_gpu_blocks: blocks / 2,
        ..Profile::l40s()
    }
}

/// `hetero`: two fast engines ([`fast_profile`]) then two slow ones ([`slow_profile`]) under
/// the `long` scenario's own load (256 groups, rate 800, concurrency 300). Ceiling: each
/// engine's throughput when it serves a quarter of the load alone at its own speed (direct,
/// saturated), summed over the four engines: 2 × fast + 2 × slow.
#[must_use]
pub fn hetero(quick: bool, seed: u64, blocks: usize) -> PoolScenario {
    let mut sc = Scenario::long(quick, seed);
    sc.name = "hetero".to_owned();
    let (fast, slow) = (fast_profile(blocks), slow_profile(blocks));
    PoolScenario {
        scenario: sc,
        pool: Pool::of(
            vec![
                (Some(fast.clone()), Role::Both),
                (Some(fast.clone()), Role::Both),
                (Some(slow.clone()), Role::Both),
                (Some(slow.clone()), Role::Both),
            ],
            false,
        ),
        directs: vec![
            Direct {
                name: "direct fast (1 H100 engine, 1/4 of the load)".to_owned(),
                profile: Some(fast),
                count: 2,
                share: 4,
            },
            Direct {
                name: "direct slow (1 L40S engine, 1/4 of the load)".to_owned(),
                profile: Some(slow),
                count: 2,
                share: 4,
            },
        ],
        aggregated: None,
    }
}

/// `pd`: two prefill and two decode engines of the common profile behind a `pdGroup`
/// ModelServer, under [`scaled_long`] for four engines; compared with the same four
/// engines aggregated, whose ceiling is direct × 4.
#[must_use]
pub fn pd(quick: bool, seed: u64) -> PoolScenario {
    PoolScenario {
        scenario: scaled_long("pd", 4, quick, seed),
        pool: Pool::of(
            vec![
                (None, Role::Prefill),
                (None, Role::Prefill),
                (None, Role::Decode),
                (None, Role::Decode),
            ],
            true,
        ),
        directs: vec![Direct {
            name: "direct (1 engine, 1/4 of the load)".to_owned(),
            profile: None,
            count: 4,
            share: 4,
        }],
        aggregated: Some(Pool::uniform(4)),
    }
}

/// The ceiling of a pool scenario in requests per second: the sum over `directs` of
/// `count` × the throughput of its row in `throughputs` (same order); `None` without
/// directs or when a throughput is missing.
#[must_use]
pub fn ceiling(directs: &[Direct], throughputs: &[Option<f64>]) -> Option<f64> {
    if directs.is_empty() || directs.len() != throughputs.len() {
        return None;
    }
    directs
        .iter()
        .zip(throughputs)
        .map(|(d, t)| t.map(|t| d.count as f64 * t))
        .sum()
}

#[cfg(test)]
mod tests;
