//! Failure handling of a role replica (Go Kthena `handleErrorPod`, `handleDeletedPod` in
//! `pkg/model-serving-controller/controller/model_serving_controller.go`), decided from what
//! exists rather than from pod events.
//!
//! Go recovers only on the delete or error event of a pod that existed; a pod whose create
//! the API server refused has no such event, and Go only retries its create. Here a
//! missing pod counts as lost unless it is in the record of refused creates
//! ([`crate::serving::observed::Observed::not_created`]): such a pod is created again, and
//! its role replica is not broken for it.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;

use crate::serving::observed::ObservedRole;

/// What is wrong with one role replica.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplicaCheck {
    /// Expected pods that do not exist (deleted, or never created), in creation order: to
    /// create when the replica is kept.
    pub missing: Vec<Pod>,
    /// How many of `missing` are lost: not in the record of refused creates (they existed
    /// and are gone, or were never tried).
    pub lost: usize,
    /// Errored pods whose `restartGracePeriodSeconds` has passed (or is 0): to delete.
    pub expired: Vec<String>,
    /// Time until the next errored pod's grace period ends, if one is still in it.
    pub wait: Option<Duration>,
}

impl ReplicaCheck {
    /// Checks `seen` against its `expected` pods. A missing pod named in `not_created` (its
    /// create was refused by the API server) is not lost. An errored pod is expired when it
    /// has been errored for `grace_s` seconds (from its Ready condition's last transition;
    /// at once when that is unknown or `grace_s` ≤ 0).
    #[must_use]
    pub(crate) fn new(
        expected: Vec<Pod>,
        seen: &ObservedRole,
        not_created: &BTreeSet<String>,
        (grace_s, now): (i64, Timestamp),
    ) -> Self {
        let missing: Vec<Pod> = expected
            .into_iter()
            .filter(|p| !seen.pods.contains(&p.name_any()))
            .collect();
        let lost = missing
            .iter()
            .filter(|p| !not_created.contains(&p.name_any()))
            .count();
        let mut check = Self {
            missing,
            lost,
            ..Self::default()
        };
        let grace = Duration::from_secs(u64::try_from(grace_s).unwrap_or(0));
        for (name, since) in &seen.failed {
            let elapsed = since.map_or(grace, |t| {
                let d = now.duration_since(t);
                Duration::try_from(d).unwrap_or(Duration::ZERO)
            });
            if grace.is_zero() || elapsed >= grace {
                check.expired.push(name.clone());
            } else {
                let left = grace - elapsed;
                check.wait = Some(check.wait.map_or(left, |w| w.min(left)));
            }
        }
        check
    }

    /// True when the replica lost a pod or has an expired errored pod: the recovery policy
    /// applies. Pods whose create was refused do not break it.
    #[must_use]
    pub(crate) fn broken(&self) -> bool {
        self.lost > 0 || !self.expired.is_empty()
    }
}

#[cfg(test)]
mod tests;
