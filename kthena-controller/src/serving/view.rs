//! What the reconcile, the rolling update and the status share: the view of a ServingGroup
//! after a reconcile, Go's scaled `IntOrString`, the group partition and a role replica's
//! status.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kthena_api::ModelServing;
use kthena_api::workload::Role;

use crate::serving::observed::{ObservedRole, ReplicaStatus};

/// A ServingGroup as the status sees it after this reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    /// Group ordinal.
    pub ordinal: u32,
    /// Revision its pods carry.
    pub revision: String,
    /// Status (Deleting for groups deleted by this plan).
    pub status: ReplicaStatus,
}

/// `IntOrString` scaled against `total` (Go `intstr.GetScaledValueFromIntOrPercent`);
/// percentages are rounded up when `round_up`, else down; bad strings are 0.
#[must_use]
pub(crate) fn scaled_value(value: &IntOrString, total: i32, round_up: bool) -> i32 {
    match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let Some(pct) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
                return 0;
            };
            let num = pct * i64::from(total);
            let v = if round_up {
                (num + 99).div_euclid(100)
            } else {
                num.div_euclid(100)
            };
            i32::try_from(v).unwrap_or(0)
        }
    }
}

/// The ServingGroup partition: `rolloutStrategy.rollingUpdateConfiguration.partition`
/// (percent of `spec.replicas` rounded up), 0 when unset. Ordinals `[0, partition)` are
/// protected: deleted last when scaling down.
#[must_use]
pub(crate) fn group_partition(ms: &ModelServing) -> u32 {
    let replicas = ms.spec.replicas.unwrap_or(1);
    let p = ms
        .spec
        .rollout_strategy
        .as_ref()
        .and_then(|r| r.rolling_update_configuration.as_ref());
    let p = p
        .and_then(|c| c.partition.as_ref())
        .map_or(0, |p| scaled_value(p, replicas, true));
    u32::try_from(p).unwrap_or(0)
}

/// Status of a role replica: Deleting when all its pods terminate, Running when it has its
/// `1 + workerReplicas` pods all Running and Ready, else Creating.
#[must_use]
pub(crate) fn role_status(role: &Role, seen: &ObservedRole) -> ReplicaStatus {
    let want = usize::try_from(role.worker_replicas).unwrap_or(0) + 1;
    if seen.pods.is_empty() && seen.terminating > 0 {
        ReplicaStatus::Deleting
    } else if seen.pods.len() == want && seen.ready == want {
        ReplicaStatus::Running
    } else {
        ReplicaStatus::Creating
    }
}
