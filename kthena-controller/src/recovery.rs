//! Failure handling of a role replica (Go Kthena `handleErrorPod`, `handleDeletedPod` in
//! `pkg/model-serving-controller/controller/model_serving_controller.go`), decided from what exists
//! rather than from pod events.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;

use crate::observed::ObservedRole;

/// What is wrong with one role replica.
#[derive(Debug, Clone, Default)]
pub struct ReplicaCheck {
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
    pub fn new(expected: Vec<Pod>, seen: &ObservedRole, grace_s: i64, now: Timestamp) -> Self {
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
    pub fn broken(&self) -> bool {
        !self.missing.is_empty() || !self.expired.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{observed_pod, sample};
    use crate::{Observed, RoleReplicaRef, role_replica_pods};

    #[test]
    fn missing_and_errored_pods() -> crate::testutil::TestResult {
        let ms = sample()?;
        let role = &ms.spec.template.roles[0];
        let at = RoleReplicaRef {
            group: "sample-0",
            role,
            ordinal: 0,
            revision: "rev1",
            role_hash: "h",
        };
        let mut pods: Vec<_> = (0..4)
            .map(|i| observed_pod("sample", "sample-0", "prefill", 0, i, true, None))
            .collect();
        let seen = Observed::new("sample", "uid-1", &pods, &[]);
        let now: Timestamp = "2026-01-01T00:01:00Z".parse()?;
        let ok = ReplicaCheck::new(
            role_replica_pods(&ms, &at),
            &seen.groups[&0].roles["prefill"][&0],
            60,
            now,
        );
        assert!(!ok.broken() && ok.wait.is_none());
        pods.remove(2);
        let status = pods[1].status.get_or_insert_default();
        status.phase = Some("Failed".to_owned());
        let ready = &mut status.conditions.get_or_insert_default()[0];
        ready.status = "False".to_owned();
        ready.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:30Z".parse()?,
        ));
        let seen = Observed::new("sample", "uid-1", &pods, &[]);
        let replica = &seen.groups[&0].roles["prefill"][&0];
        let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, 60, now);
        let missing: Vec<_> = c.missing.iter().map(|p| p.name_any()).collect();
        assert_eq!(missing, ["sample-0-prefill-0-2"]);
        assert!(c.expired.is_empty());
        assert_eq!(c.wait, Some(Duration::from_secs(30)));
        let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, 30, now);
        assert_eq!(c.expired, ["sample-0-prefill-0-1"]);
        let c = ReplicaCheck::new(role_replica_pods(&ms, &at), replica, 0, now);
        assert_eq!((c.expired.len(), c.wait), (1, None));
        Ok(())
    }
}
