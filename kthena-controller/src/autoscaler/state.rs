//! The scaling state kept between rounds, per policy (Go: one scaler per policy key,
//! recreated when the policy's generation changes).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use kthena_api::AutoscalingPolicy;
use kthena_autoscale::{Optimizer, PodHistograms, RolesScaler, Scaler};
use kube::ResourceExt as _;

/// `namespace/name` of a policy: the key of its state and of its log lines.
pub(super) fn key(p: &AutoscalingPolicy) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

/// The state kept for one policy: its scaler (a [`Scaler`], [`RolesScaler`] or
/// [`Optimizer`]) and the histogram snapshots of its pods, for the generation they were built
/// from.
pub(super) struct Kept<S> {
    generation: Option<i64>,
    /// The windows and modes of the policy's targets.
    pub(super) scaler: S,
    /// Histogram snapshots of the pods, for P95 over deltas.
    pub(super) histograms: PodHistograms,
}

/// Scaling state of every policy, by `namespace/name`, one map per kind of target.
#[derive(Default)]
pub(super) struct States {
    pub(super) single: HashMap<String, Kept<Scaler>>,
    pub(super) roles: HashMap<String, Kept<RolesScaler>>,
    pub(super) hetero: HashMap<String, Kept<Optimizer>>,
    /// Whether some policy of the last full round has a target that may go to zero (the
    /// wake ticks run only then).
    pub(super) zero_capable: bool,
}

impl States {
    /// Drops the state of every policy whose key is not in `live`.
    pub(super) fn retain(&mut self, live: &[String]) {
        self.single.retain(|k, _| live.contains(k));
        self.roles.retain(|k, _| live.contains(k));
        self.hetero.retain(|k, _| live.contains(k));
    }
}

/// The state kept in `states` for `policy`: the stored one while it was built from the
/// policy's current `metadata.generation`, else a fresh one with the scaler from `make`, so a
/// spec change restarts the windows.
///
/// # Errors
/// Whatever `make` returns (an AutoscalingPolicy the scaling math cannot use).
pub(super) fn kept<'a, S>(
    states: &'a mut HashMap<String, Kept<S>>,
    policy: &AutoscalingPolicy,
    make: impl FnOnce(&AutoscalingPolicy) -> kthena_autoscale::Result<S>,
) -> kthena_autoscale::Result<&'a mut Kept<S>> {
    let generation = policy.metadata.generation;
    let fresh = || -> kthena_autoscale::Result<Kept<S>> {
        Ok(Kept {
            generation,
            scaler: make(policy)?,
            histograms: PodHistograms::new(),
        })
    };
    Ok(match states.entry(key(policy)) {
        Entry::Occupied(e) if e.get().generation == generation => e.into_mut(),
        Entry::Occupied(mut e) => {
            e.insert(fresh()?);
            e.into_mut()
        }
        Entry::Vacant(e) => e.insert(fresh()?),
    })
}
