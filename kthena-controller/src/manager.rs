//! What runs the controllers together, as Go's `kthena-controller-manager`: which of them
//! `--controllers` enables ([`ControllerSet`]), each with its own configuration
//! ([`Controllers`]), leader election on Go's Lease ([`run_leader_elected`]), the health
//! probes ([`serve_health`]) and the client-side API rate limit ([`rate_limit`]).

pub mod flags;
mod health;
mod leader;
mod ratelimit;

use crate::autoscaler::AutoscalerConfig;
use crate::booster::BoosterConfig;
use crate::error::{Error, Result};

pub use health::serve_health;
pub use leader::{LEASE_NAME, LeaderElection, identity, run_leader_elected};
pub use ratelimit::rate_limit;

/// The controllers [`run_leader_elected`] runs while holding the Lease, each with its own
/// configuration.
#[derive(Debug, Clone, Default)]
pub struct Controllers {
    /// The ModelServing controller (always run).
    pub serving: crate::serving::Config,
    /// The autoscaler to run next to it. `None` (default): no autoscaler (without leader
    /// election call [`crate::autoscaler::run_autoscaler`] yourself).
    pub autoscaler: Option<AutoscalerConfig>,
    /// The ModelBooster controller to run next to it. `None` (default): none (without leader
    /// election call [`crate::booster::run_booster`] yourself).
    pub booster: Option<BoosterConfig>,
}

/// Which controllers `--controllers` enables (Go semantics: comma-separated; `*` all,
/// `-name` disables, `+name` or `name` enables; an enabling entry wins over `-name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerSet {
    /// `modelserving` runs.
    pub modelserving: bool,
    /// `modelbooster` runs.
    pub modelbooster: bool,
    /// `autoscaler` runs.
    pub autoscaler: bool,
}

impl ControllerSet {
    /// Parses a `--controllers` value.
    ///
    /// # Errors
    /// [`Error::UnknownController`] for a name other than `*`, `modelserving`,
    /// `modelbooster`, `autoscaler`.
    pub fn parse(value: &str) -> Result<Self> {
        let (mut all, mut on, mut off) = (false, Vec::new(), Vec::new());
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "*" {
                all = true;
                continue;
            }
            let (list, name) = match item.strip_prefix('-') {
                Some(name) => (&mut off, name),
                None => (&mut on, item.strip_prefix('+').unwrap_or(item)),
            };
            if !["modelserving", "modelbooster", "autoscaler"].contains(&name) {
                return Err(Error::UnknownController(item.to_owned()));
            }
            list.push(name);
        }
        let enabled = |n: &str| on.contains(&n) || (all && !off.contains(&n));
        Ok(Self {
            modelserving: enabled("modelserving"),
            modelbooster: enabled("modelbooster"),
            autoscaler: enabled("autoscaler"),
        })
    }
}

#[cfg(test)]
mod tests;
