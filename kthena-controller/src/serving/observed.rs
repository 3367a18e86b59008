//! What exists: the owned pods and services of one ModelServing, grouped by ServingGroup and
//! role replica from their labels (Go Kthena keeps the same tree in its in-memory store,
//! rebuilt from pod labels at start).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kthena_api::workload::Role;
use kube::ResourceExt as _;

use crate::names::{
    GROUP_NAME_LABEL, POD_DELETION_COST_ANNOTATION, REVISION_LABEL, ROLE_ID_LABEL, ROLE_LABEL,
    ROLE_TEMPLATE_HASH_LABEL, owned_by, split_ordinal,
};

/// Status of a ServingGroup or role replica, as Go's store names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaStatus {
    /// Some pods missing or not Running and Ready.
    Creating,
    /// Every pod Running and Ready.
    Running,
    /// Being deleted (all its pods have a deletionTimestamp).
    Deleting,
}

impl ReplicaStatus {
    /// Scale-down priority (Go `binpack_scaledown.go`): Running = 1, anything else 0; lower
    /// is deleted first.
    #[must_use]
    pub fn priority(self) -> u8 {
        u8::from(self == Self::Running)
    }
}

/// One role replica (`<role>-<r>` in one group).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedRole {
    /// Names of its pods that are not terminating, sorted.
    pub pods: BTreeSet<String>,
    /// How many of them are Running with condition Ready=True.
    pub ready: usize,
    /// Names of those Running and Ready pods, sorted.
    pub running_pods: BTreeSet<String>,
    /// Revision label of its pods (of the first pod seen when they differ).
    pub revision: String,
    /// Pods with a deletionTimestamp.
    pub terminating: usize,
    /// Σ of the pods' `controller.kubernetes.io/pod-deletion-cost` (invalid or missing = 0).
    pub deletion_cost: i64,
    /// Role template hash label of its pods (of the first pod seen when they differ).
    pub template_hash: String,
    /// Errored pods (see [`errored_since`]): name → since when (`None` if unknown).
    pub failed: BTreeMap<String, Option<Timestamp>>,
}

/// One ServingGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedGroup {
    /// Group name `<ms>-<g>`.
    pub name: String,
    /// Revision label of its pods (of the first pod seen when they differ).
    pub revision: String,
    /// Role name → role ordinal → role replica.
    pub roles: BTreeMap<String, BTreeMap<u32, ObservedRole>>,
}

impl ObservedGroup {
    /// Σ pod deletion cost of the group.
    #[must_use]
    pub fn deletion_cost(&self) -> i64 {
        self.roles
            .values()
            .flat_map(BTreeMap::values)
            .map(|r| r.deletion_cost)
            .sum()
    }

    /// True when every pod of the group is terminating.
    #[must_use]
    pub fn deleting(&self) -> bool {
        self.roles
            .values()
            .flat_map(BTreeMap::values)
            .all(|r| r.pods.is_empty())
    }
}

/// The roles a ControllerRevision recorded for a revision (`data: {"data": [roles]}`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecordedRevision {
    /// The revision (`<ms>-<revision>` is the ControllerRevision's name).
    pub revision: String,
    /// Its roles.
    pub roles: Vec<Role>,
}

/// The owned children of one ModelServing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observed {
    /// Group ordinal → group.
    pub groups: BTreeMap<u32, ObservedGroup>,
    /// Names of the owned services.
    pub services: BTreeSet<String>,
    /// Names of pods or services carrying our labels but owned by another UID (an old
    /// ModelServing of the same name): reconcile waits (Go requeues after 1 s).
    pub foreign: BTreeSet<String>,
    /// The roles of `status.currentRevision` from its ControllerRevision, when it is not the
    /// template's revision (set by the caller; `None` from [`Observed::new`]): missing
    /// partition-protected groups are recreated from them (Go `scaleUpServingGroups`).
    pub current: Option<RecordedRevision>,
    /// Pods of the ModelServing's generation whose create the API server refused (or that
    /// were not tried after the refusal of an earlier pod of their role replica), not seen
    /// since (set by the caller from its record; empty from [`Observed::new`]): missing,
    /// but not lost.
    pub not_created: BTreeSet<String>,
}

impl Observed {
    /// Groups `pods` and `services` of the ModelServing `ms_name` with UID `uid`; objects
    /// without the group-name/role/role-id labels, or with a group name not of the form
    /// `<ms_name>-<ordinal>`, are ignored; objects owned by another UID go to `foreign`.
    #[must_use]
    pub fn new(ms_name: &str, uid: &str, pods: &[Pod], services: &[Service]) -> Self {
        let mut out = Self::default();
        for pod in pods {
            if !owned_by(Some(pod.owner_references()), uid) {
                out.foreign.insert(pod.name_any());
                continue;
            }
            out.add_pod(ms_name, pod);
        }
        for svc in services {
            if owned_by(Some(svc.owner_references()), uid) {
                out.services.insert(svc.name_any());
            } else {
                out.foreign.insert(svc.name_any());
            }
        }
        out
    }

    fn add_pod(&mut self, ms_name: &str, pod: &Pod) {
        let labels = pod.labels();
        let (Some(group), Some(role), Some(id)) = (
            labels.get(GROUP_NAME_LABEL),
            labels.get(ROLE_LABEL),
            labels.get(ROLE_ID_LABEL),
        ) else {
            return;
        };
        let Some((ms, g)) = split_ordinal(group) else {
            return;
        };
        let Some((_, r)) = split_ordinal(id) else {
            return;
        };
        if ms != ms_name {
            return;
        }
        let entry = self.groups.entry(g).or_insert_with(|| ObservedGroup {
            name: group.clone(),
            revision: labels.get(REVISION_LABEL).cloned().unwrap_or_default(),
            roles: BTreeMap::new(),
        });
        let replica = entry
            .roles
            .entry(role.clone())
            .or_default()
            .entry(r)
            .or_default();
        if replica.revision.is_empty() {
            let revision = labels.get(REVISION_LABEL).cloned().unwrap_or_default();
            replica.revision = revision;
        }
        if replica.template_hash.is_empty() {
            let hash = labels
                .get(ROLE_TEMPLATE_HASH_LABEL)
                .cloned()
                .unwrap_or_default();
            replica.template_hash = hash;
        }
        if pod.metadata.deletion_timestamp.is_some() {
            replica.terminating += 1;
            return;
        }
        replica.pods.insert(pod.name_any());
        if let Some(since) = errored_since(pod) {
            replica.failed.insert(pod.name_any(), since);
        }
        if running_and_ready(pod) {
            replica.ready += 1;
            replica.running_pods.insert(pod.name_any());
        }
        replica.deletion_cost += pod
            .annotations()
            .get(POD_DELETION_COST_ANNOTATION)
            .and_then(|c| c.parse::<i64>().ok())
            .unwrap_or(0);
    }
}

/// Go's `IsPodRunningAndReady`: phase Running and condition Ready=True.
#[must_use]
pub fn running_and_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `Some(since)` when `pod` is in error as Go's pod handler sees it: phase `Failed`, or not
/// Ready while Running or Pending with a (init) container restarted. `since` is the Ready
/// condition's last transition (when it stopped being ready), or `None` when absent.
#[must_use]
pub(crate) fn errored_since(pod: &Pod) -> Option<Option<Timestamp>> {
    let status = pod.status.as_ref()?;
    let phase = status.phase.as_deref();
    let restarted = matches!(phase, Some("Running" | "Pending"))
        && status
            .container_statuses
            .iter()
            .chain(status.init_container_statuses.iter())
            .flatten()
            .any(|c| c.restart_count > 0);
    if phase != Some("Failed") && (running_and_ready(pod) || !restarted) {
        return None;
    }
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready");
    Some(
        ready
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
    )
}

#[cfg(test)]
mod tests;
