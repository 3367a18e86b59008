//! `ServingGroupRollingUpdate` (Go Kthena `manageRollingUpdate` in
//! `pkg/model-serving-controller/controller/model_serving_controller.go`): which
//! outdated ServingGroups to delete now so that they are recreated at the new revision
//! while at most `maxUnavailable` groups are unavailable.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use kthena_api::ModelServing;
use kthena_api::workload::{Role, RolloutStrategyType};

use crate::serving::observed::{ObservedRole, ReplicaStatus};
use crate::serving::view::{GroupView, group_partition, role_status, scaled_value};

/// `rolloutStrategy.rollingUpdateConfiguration.maxUnavailable` resolved against
/// `spec.replicas` (percent rounded down, at least 1 as for a Deployment, so a rollout
/// always progresses; default 1).
#[must_use]
pub(crate) fn max_unavailable(ms: &ModelServing) -> i64 {
    let replicas = ms.spec.replicas.unwrap_or(1);
    let config = ms
        .spec
        .rollout_strategy
        .as_ref()
        .and_then(|r| r.rolling_update_configuration.as_ref());
    config
        .and_then(|c| c.max_unavailable.as_ref())
        .map_or(1, |m| i64::from(scaled_value(m, replicas, false)).max(1))
}

/// The ordinals of outdated groups to delete in this pass (none for `RoleRollingUpdate`,
/// which replaces role replicas instead: [`role_rolling_deletions`]).
///
/// With `p` the partition, only `groups[p..]` (by ordinal) are considered. `newUnavailable`
/// = groups at `revision` that are not Running; `maxScaleDown` = #groups − (replicas −
/// maxUnavailable) − newUnavailable. Up to `maxScaleDown` groups are taken from the end of
/// `runningOutdated ++ notRunningOutdated`: not-Running outdated groups first, highest
/// ordinal first. Groups already Deleting count as not Running (and use up the budget).
#[must_use]
pub(crate) fn rolling_update_deletions(
    ms: &ModelServing,
    groups: &[GroupView],
    revision: &str,
) -> Vec<u32> {
    let strategy = ms.spec.rollout_strategy.as_ref().map(|r| r.type_);
    if strategy.is_some_and(|t| t != RolloutStrategyType::ServingGroupRollingUpdate) {
        return Vec::new();
    }
    let p = group_partition(ms) as usize;
    if p >= groups.len() {
        return Vec::new();
    }
    let mut sorted = groups.to_vec();
    sorted.sort_by_key(|g| g.ordinal);
    let considered = &sorted[p..];
    let running = |g: &&GroupView| g.status == ReplicaStatus::Running;
    let new_unavailable = considered
        .iter()
        .filter(|g| g.revision == revision && !running(g))
        .count();
    let outdated = considered.iter().filter(|g| g.revision != revision);
    let (running_outdated, not_running): (Vec<&GroupView>, Vec<&GroupView>) =
        outdated.partition(running);
    let replicas = i64::from(ms.spec.replicas.unwrap_or(1));
    let min_available = replicas - max_unavailable(ms);
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let max_scale_down = count(groups.len()) - min_available - count(new_unavailable);
    let Ok(max_scale_down) = usize::try_from(max_scale_down) else {
        return Vec::new();
    };
    running_outdated
        .into_iter()
        .chain(not_running)
        .rev()
        .take(max_scale_down)
        .filter(|g| g.status != ReplicaStatus::Deleting)
        .map(|g| g.ordinal)
        .collect()
}

/// `RoleRollingUpdate` for one role of one group: the role replicas to delete now so that
/// they are recreated with the role's current template (`hash`).
///
/// `replicas` are all the role's replicas in the group (terminating ones included),
/// `candidates` the ordinals that may be deleted. Outdated = candidates whose template hash
/// differs, minus the first `role.partition` ordinals (percent of role replicas rounded
/// up); not-Running first, then highest ordinal. `newUnavailable` = terminating replicas
/// plus up-to-date ones not Running. At most all outdated when `role.maxUnavailable` is
/// unset, else `max(0, #replicas − max(0, role.replicas − maxUnavailable) − newUnavailable)`
/// (maxUnavailable percent of role replicas rounded down, at least 1).
#[must_use]
pub(crate) fn role_rolling_deletions(
    role: &Role,
    hash: &str,
    replicas: &BTreeMap<u32, ObservedRole>,
    candidates: &BTreeSet<u32>,
) -> Vec<u32> {
    let want = role.replicas.unwrap_or(1);
    let partition = role
        .partition
        .as_ref()
        .map_or(0, |p| scaled_value(p, want, true));
    let protected: BTreeSet<u32> = replicas
        .keys()
        .copied()
        .take(usize::try_from(partition).unwrap_or(0))
        .collect();
    let status = |r: &ObservedRole| role_status(role, r);
    let new_unavailable = replicas
        .values()
        .filter(|r| {
            r.pods.is_empty() || (r.template_hash == hash && status(r) != ReplicaStatus::Running)
        })
        .count();
    let mut outdated: Vec<(u32, ReplicaStatus)> = replicas
        .iter()
        .filter(|(o, r)| {
            candidates.contains(o) && !protected.contains(o) && r.template_hash != hash
        })
        .map(|(&o, r)| (o, status(r)))
        .collect();
    outdated.sort_by_key(|&(o, st)| (st.priority(), Reverse(o)));
    let max = role.max_unavailable.as_ref().map_or(outdated.len(), |mu| {
        let mu = i64::from(scaled_value(mu, want, false)).max(1);
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let min_available = (i64::from(want) - mu).max(0);
        usize::try_from(count(replicas.len()) - min_available - count(new_unavailable)).unwrap_or(0)
    });
    outdated.into_iter().take(max).map(|(o, _)| o).collect()
}

#[cfg(test)]
mod tests;
