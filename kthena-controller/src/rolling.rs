//! `ServingGroupRollingUpdate` (Go Kthena `manageRollingUpdate` in
//! `pkg/model-serving-controller/controller/model_serving_controller.go`): which
//! outdated ServingGroups to delete now so that they are recreated at the new revision
//! while at most `maxUnavailable` groups are unavailable.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use kthena_api::ModelServing;
use kthena_api::workload::{Role, RolloutStrategyType};

use crate::observed::{ObservedRole, ReplicaStatus};
use crate::view::{GroupView, group_partition, role_status, scaled_value};

/// `rolloutStrategy.rollingUpdateConfiguration.maxUnavailable` resolved against
/// `spec.replicas` (percent rounded down, at least 1 as for a Deployment, so a rollout
/// always progresses; default 1).
#[must_use]
pub fn max_unavailable(ms: &ModelServing) -> i64 {
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
pub fn rolling_update_deletions(
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
pub fn role_rolling_deletions(
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
mod tests {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kthena_api::workload::{RollingUpdateConfiguration, RolloutStrategy};

    use super::*;
    use crate::testutil::{TestResult, sample};
    use ReplicaStatus::{Creating, Deleting, Running};

    fn g(ordinal: u32, revision: &str, status: ReplicaStatus) -> GroupView {
        GroupView {
            ordinal,
            revision: revision.to_owned(),
            status,
        }
    }

    fn with(
        max_unavailable: Option<IntOrString>,
        partition: Option<IntOrString>,
    ) -> TestResult<ModelServing> {
        let mut ms = sample()?;
        ms.spec.replicas = Some(4);
        ms.spec.rollout_strategy = Some(RolloutStrategy {
            rolling_update_configuration: Some(RollingUpdateConfiguration {
                max_unavailable,
                partition,
            }),
            ..RolloutStrategy::default()
        });
        Ok(ms)
    }

    #[test]
    fn one_group_at_a_time_by_default_highest_first() -> TestResult {
        let mut ms = sample()?;
        ms.spec.replicas = Some(4);
        let all_old: Vec<_> = (0..4).map(|o| g(o, "old", Running)).collect();
        assert_eq!(rolling_update_deletions(&ms, &all_old, "new"), [3]);
        // Group 3 is being recreated (new, not Running): nothing else goes.
        let mid = [
            g(0, "old", Running),
            g(1, "old", Running),
            g(2, "old", Running),
            g(3, "new", Creating),
        ];
        assert!(rolling_update_deletions(&ms, &mid, "new").is_empty());
        // A not-Running outdated group goes before Running ones.
        let mixed = [
            g(0, "old", Creating),
            g(1, "old", Running),
            g(2, "new", Running),
            g(3, "new", Running),
        ];
        assert_eq!(rolling_update_deletions(&ms, &mixed, "new"), [0]);
        assert!(rolling_update_deletions(&ms, &all_old, "old").is_empty());
        Ok(())
    }

    /// Regression: `10%` of 4 groups resolved to 0 and no outdated group was ever deleted
    /// (the webhook no longer refuses it, so the autoscaler can scale such an object down):
    /// a percentage that rounds down to 0 counts as 1, as for a Deployment.
    #[test]
    fn a_percentage_that_rounds_to_zero_still_rolls_one_group() -> TestResult {
        let all_old: Vec<_> = (0..4).map(|o| g(o, "old", Running)).collect();
        let ms = with(Some(IntOrString::String("10%".to_owned())), None)?;
        assert_eq!(max_unavailable(&ms), 1);
        assert_eq!(rolling_update_deletions(&ms, &all_old, "new"), [3]);
        Ok(())
    }

    #[test]
    fn max_unavailable_and_partition() -> TestResult {
        let all_old: Vec<_> = (0..4).map(|o| g(o, "old", Running)).collect();
        let ms = with(Some(IntOrString::String("50%".to_owned())), None)?;
        assert_eq!(max_unavailable(&ms), 2);
        assert_eq!(rolling_update_deletions(&ms, &all_old, "new"), [3, 2]);
        let ms = with(Some(IntOrString::Int(3)), Some(IntOrString::Int(2)))?;
        // Ordinals 0 and 1 are protected by the partition.
        assert_eq!(rolling_update_deletions(&ms, &all_old, "new"), [3, 2]);
        let deleting = [
            g(0, "old", Running),
            g(1, "old", Running),
            g(2, "old", Running),
            g(3, "old", Deleting),
        ];
        let ms = with(None, None)?;
        assert!(rolling_update_deletions(&ms, &deleting, "new").is_empty());
        Ok(())
    }

    fn replica(hash: &str, ready: bool, terminating: bool) -> ObservedRole {
        let pods = if terminating {
            BTreeSet::new()
        } else {
            (0..4).map(|i| format!("p{i}")).collect()
        };
        ObservedRole {
            ready: if ready && !terminating { 4 } else { 0 },
            terminating: usize::from(terminating),
            template_hash: hash.to_owned(),
            pods,
            ..ObservedRole::default()
        }
    }

    #[test]
    fn role_replicas_roll_within_their_max_unavailable() -> TestResult {
        let ms = sample()?;
        let mut role = ms.spec.template.roles[0].clone();
        role.replicas = Some(4);
        let all = |m: &BTreeMap<u32, ObservedRole>| m.keys().copied().collect::<BTreeSet<u32>>();
        let old: BTreeMap<u32, ObservedRole> =
            (0..4).map(|o| (o, replica("old", o != 1, false))).collect();
        // Default maxUnavailable 1: the not-Running one first.
        assert_eq!(role_rolling_deletions(&role, "new", &old, &all(&old)), [1]);
        role.max_unavailable = Some(IntOrString::String("50%".to_owned()));
        assert_eq!(
            role_rolling_deletions(&role, "new", &old, &all(&old)),
            [1, 3]
        );
        // A replica being recreated (terminating) uses up the budget.
        let mut mid = old.clone();
        mid.insert(1, replica("new", false, true));
        assert_eq!(role_rolling_deletions(&role, "new", &mid, &all(&mid)), [3]);
        // Unset maxUnavailable: every outdated replica at once; partition protects [0, 2).
        role.max_unavailable = None;
        role.partition = Some(IntOrString::Int(2));
        assert_eq!(
            role_rolling_deletions(&role, "new", &old, &all(&old)),
            [3, 2]
        );
        role.partition = None;
        assert_eq!(
            role_rolling_deletions(&role, "new", &old, &all(&old)),
            [1, 3, 2, 0]
        );
        assert!(role_rolling_deletions(&role, "old", &old, &all(&old)).is_empty());
        Ok(())
    }
}
