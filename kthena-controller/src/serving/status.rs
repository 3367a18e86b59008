//! `status` of a ModelServing (Go Kthena `UpdateModelServingStatus` and `utils.SetCondition`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kthena_api::ModelServing;
use kthena_api::workload::ModelServingStatus;

use crate::names::scale_label_selector;
use crate::serving::observed::ReplicaStatus;
use crate::serving::view::{GroupView, group_partition};

/// Condition type: every ServingGroup is Running.
pub(crate) const AVAILABLE: &str = "Available";
/// Condition type: some groups are not Running (no update under way).
pub(crate) const PROGRESSING: &str = "Progressing";
/// Condition type: some groups are not Running while groups of an older revision remain.
pub(crate) const UPDATE_IN_PROGRESS: &str = "UpdateInProgress";

/// The status after a reconcile, from the previous status, the groups after the plan and
/// the template revision. `now` stamps conditions whose status changes.
///
/// * `replicas` = groups including deleting ones; `availableReplicas` = Running groups;
///   `updatedReplicas` = non-deleting groups at `revision`; `currentReplicas` = the other
///   non-deleting groups, or `updatedReplicas` when there is no partition and updated =
///   available = replicas = `spec.replicas`.
/// * `updateRevision` = `revision`; `currentRevision` = the previous one while a non-updated
///   group still has it (or a deleting group, which may be recreated at it), `revision`
///   when every group is updated, else the most common revision among non-updated groups.
/// * Conditions as Go's `SetCondition` (see [`set_condition`]).
/// * With no groups at all (scaled to 0) every count is 0 and `Available` is true. Go
///   writes only the revisions and `labelSelector` then, so its counts (and the scale
///   subresource an HPA reads) keep the values of before the last group went.
#[must_use]
pub(crate) fn status(
    ms: &ModelServing,
    groups: &[GroupView],
    revision: &str,
    now: &Time,
) -> ModelServingStatus {
    let mut st = ms.status.clone().unwrap_or_default();
    let first_role = ms
        .spec
        .template
        .roles
        .first()
        .map_or("", |r| r.name.as_str());
    st.label_selector = Some(scale_label_selector(
        &ms.metadata.name.clone().unwrap_or_default(),
        first_role,
    ));
    st.update_revision = Some(revision.to_owned());
    let mut progressing = Vec::new();
    let (mut updated, mut current) = (Vec::new(), Vec::new());
    let mut available = 0;
    let mut old_revisions: BTreeMap<&str, usize> = BTreeMap::new();
    // Revisions of deleting groups: they keep the previous currentRevision (a deleted
    // partition-protected group is recreated at it, from its ControllerRevision).
    let mut deleting: Vec<&str> = Vec::new();
    for g in groups {
        if g.status == ReplicaStatus::Deleting {
            progressing.push(g.ordinal);
            deleting.push(&g.revision);
            continue;
        }
        if g.status == ReplicaStatus::Running {
            available += 1;
        } else {
            progressing.push(g.ordinal);
        }
        if g.revision == revision {
            updated.push(g.ordinal);
        } else {
            current.push(g.ordinal);
            *old_revisions.entry(g.revision.as_str()).or_default() += 1;
        }
    }
    let previous = st.current_revision.as_deref();
    st.current_revision = match previous {
        Some(prev) if prev != revision && deleting.contains(&prev) => Some(prev.to_owned()),
        _ => Some(current_revision(previous, &old_revisions, revision)),
    };
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    st.replicas = count(groups.len());
    st.available_replicas = Some(available);
    st.updated_replicas = Some(count(updated.len()));
    st.current_replicas = Some(count(current.len()));
    let partition = group_partition(ms);
    let spec_replicas = ms.spec.replicas.unwrap_or(1);
    if partition == 0
        && [count(updated.len()), available, st.replicas]
            .iter()
            .all(|&n| n == spec_replicas)
    {
        st.current_replicas = st.updated_replicas;
    }
    let cond = new_condition(
        &progressing,
        &updated,
        current.len() > partition as usize,
        now,
    );
    set_condition(&mut st.conditions, cond);
    st.observed_generation = ms.metadata.generation;
    st
}

fn current_revision(previous: Option<&str>, old: &BTreeMap<&str, usize>, revision: &str) -> String {
    if let Some(prev) = previous.filter(|p| old.contains_key(p)) {
        return prev.to_owned();
    }
    // Most common; ties go to the smallest revision string (BTreeMap order) for stability.
    let best = old
        .iter()
        .max_by_key(|&(rev, n)| (*n, std::cmp::Reverse(*rev)));
    best.map_or(revision, |(rev, _)| *rev).to_owned()
}

/// Go's `%v` of an `[]int`: `[0 1 2]`.
fn go_list(ordinals: &[u32]) -> String {
    let items: Vec<String> = ordinals.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(" "))
}

fn new_condition(progressing: &[u32], updated: &[u32], updating: bool, now: &Time) -> Condition {
    let (type_, reason, message) = if progressing.is_empty() {
        (
            AVAILABLE,
            "AllGroupsReady",
            "All Serving groups are ready".to_owned(),
        )
    } else {
        let msg = format!("Some groups is progressing: {}", go_list(progressing));
        if updating {
            let msg = format!("{msg}, Updated Groups are: {}", go_list(updated));
            (UPDATE_IN_PROGRESS, "GroupsUpdating", msg)
        } else {
            (PROGRESSING, "GroupProgressing", msg)
        }
    };
    kthena_api::conditions::condition(type_, true, reason, message, None, now.clone())
}

/// Go's `SetCondition` (`pkg/model-serving-controller/utils`, not apimachinery's
/// `meta.SetStatusCondition` of `kthena_api::conditions`) for a new `True` condition: an
/// existing condition of its type is
/// replaced only when its status differs (so its message and time stay otherwise); a `True`
/// condition exclusive with it (Available vs Progressing / UpdateInProgress) turns `False`
/// with the new condition's reason, message and time; the new condition is appended if its
/// type was absent.
///
/// Go flips only the status, which left `Available=False` with reason `AllGroupsReady` and
/// message "All Serving groups are ready" while groups were progressing; here the `False`
/// condition says why (`GroupProgressing`, "Some groups is progressing: [1]").
pub(crate) fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    let exclusive = |a: &str, b: &str| {
        (a == AVAILABLE && (b == PROGRESSING || b == UPDATE_IN_PROGRESS))
            || (b == AVAILABLE && (a == PROGRESSING || a == UPDATE_IN_PROGRESS))
    };
    let mut found = false;
    for cur in conditions.iter_mut() {
        if cur.type_ == new.type_ {
            if cur.status != new.status {
                *cur = new.clone();
            }
            found = true;
        } else if exclusive(&cur.type_, &new.type_) && cur.status == "True" {
            cur.status = "False".to_owned();
            cur.reason.clone_from(&new.reason);
            cur.message.clone_from(&new.message);
            cur.last_transition_time = new.last_transition_time.clone();
        }
    }
    if !found {
        conditions.push(new);
    }
}
