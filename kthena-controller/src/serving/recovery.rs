//! Failure handling of a role replica (Go Kthena `handleErrorPod`, `handleDeletedPod` in
//! `pkg/model-serving-controller/controller/model_serving_controller.go`), decided from what
//! exists rather than from pod events.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;

use crate::serving::observed::ObservedRole;

/// What is wrong with one role replica.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplicaCheck {
    /// Expected pods that do not exist (deleted, or never created).
    pub missing: Vec<Pod>,
    /// Errored pods whose `restartGracePeriodSeconds` has passed (or is 0): to delete.
    pub expired: Vec<String>,
    /// Time until the next errored pod's grace period ends, if one is still in it.
    pub wait: Option<Duration>,
}

impl ReplicaCheck {
    /// Checks `seen` against its `expected` pods. An errored pod is expired when it has
    /// been errored for `grace_s` seconds (from its Ready condition's last transition; at
    /// once when that is unknown or `grace_s` ≤ 0).
    #[must_use]
    pub(crate) fn new(
        expected: Vec<Pod>,
        seen: &ObservedRole,
        grace_s: i64,
        now: Timestamp,
    ) -> Self {
        let missing = expected
            .into_iter()
            .filter(|p| !seen.pods.contains(&p.name_any()))
            .collect();
        let mut check = Self {
            missing,
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
    /// applies.
    #[must_use]
    pub(crate) fn broken(&self) -> bool {
        !self.missing.is_empty() || !self.expired.is_empty()
    }
}

#[cfg(test)]
mod tests;
