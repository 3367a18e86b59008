//! Several router replicas in front of the same engines (`--routers N`, virtual time only).
//!
//! A run with N routers starts N instances of the real router on the run's in-memory
//! network, each subscribed to every engine's KV events (a topic has as many subscribers
//! as routers, as a ZMQ PUB socket fans out), and the load generator plays a round-robin
//! front: session `i` goes to router `i mod N`. The routers share their per-endpoint
//! in-flight counts through one in-process board (`--shared-inflight on`, refreshed as
//! Redis' are: at most once per `--inflight-refresh`, 50 ms by default) or each sees only
//! its own requests (`off`); `both` runs the two. A row is named after its policy, with
//! ` ×N routers, shared in-flight` or ` ×N routers, own in-flight` appended when N > 1.

use std::time::Duration;

use anyhow::bail;
use clap::ValueEnum;
use kthena_bench::scenario::Policy;
use kthena_router::upstream::InFlightBoard;

/// Whether the replicas share their in-flight counts (`--shared-inflight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SharedInflight {
    /// One in-process board, the same semantics as Redis' `kthena:on-flight-requests`.
    On,
    /// Every router counts only its own requests.
    Off,
    /// One row of each.
    Both,
}

/// The routers of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// Router instances behind the round-robin front (at least 1).
    pub(crate) routers: usize,
    /// The refresh interval of their shared in-flight board; `None`: not shared.
    pub(crate) shared: Option<Duration>,
}

impl Replicas {
    /// One router, the benchmark's usual setup.
    pub(crate) const ONE: Self = Self {
        routers: 1,
        shared: None,
    };

    /// A fresh board for this run's routers (`None` when they do not share, or for one
    /// router, whose own counts are the whole count).
    pub(crate) fn board(self) -> Option<InFlightBoard> {
        self.shared
            .filter(|_| self.routers > 1)
            .map(InFlightBoard::new)
    }

    /// The row name of `policy` run this way.
    fn name(self, policy: &str) -> String {
        match (self.routers, self.shared) {
            (1, _) => policy.to_owned(),
            (n, Some(_)) => format!("{policy} ×{n} routers, shared in-flight"),
            (n, None) => format!("{policy} ×{n} routers, own in-flight"),
        }
    }
}

/// Checks `--routers` against the clock and `--peers`.
///
/// # Errors
/// A router count of 0, or more than one router with the real clock or `--peers`.
pub(crate) fn check(routers: &[usize], virtual_clock: bool, peers: bool) -> anyhow::Result<()> {
    if routers.contains(&0) {
        bail!("--routers: every count must be at least 1");
    }
    let several = routers.iter().any(|&n| n > 1);
    if several && !virtual_clock {
        bail!("--routers above 1 runs in virtual time only (drop --clock real)");
    }
    if several && peers {
        bail!("--routers above 1 cannot be combined with --peers (the peers run in real time)");
    }
    Ok(())
}

/// Every (policy, replicas) pair to run, policy by policy: for each of `routers` (`[1]`
/// when empty), one run per sharing mode of `shared` (one only for a single router), the
/// policy renamed after it.
pub(crate) fn expand(
    policies: &[Policy],
    routers: &[usize],
    shared: SharedInflight,
    refresh: Duration,
) -> Vec<(Policy, Replicas)> {
    let routers = if routers.is_empty() {
        &[1][..]
    } else {
        routers
    };
    let modes: &[bool] = match shared {
        SharedInflight::On => &[true],
        SharedInflight::Off => &[false],
        SharedInflight::Both => &[true, false],
    };
    let mut out = Vec::new();
    for p in policies {
        for &n in routers {
            let modes = if n == 1 { &modes[..1] } else { modes };
            for &on in modes {
                let r = Replicas {
                    routers: n,
                    shared: on.then_some(refresh),
                };
                let mut policy = p.clone();
                policy.name = r.name(&p.name);
                out.push((policy, r));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
