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
