//! Volcano gang scheduling as pure functions (Go Kthena
//! `pkg/model-serving-controller/podgroupmanager/manager.go`): one `PodGroup` per ServingGroup when
//! the PodGroup CRD exists and the ModelServing's pods use `schedulerName: volcano`, and the
//! annotations that tie each pod to its PodGroup and task.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kthena_api::ModelServing;
use kthena_api::thirdparty::{PodGroup, PodGroupSpec, SubGroupPolicy};
use kthena_api::workload::{NetworkTopologySpec, Role};
use kube::ResourceExt as _;

use crate::names::{GROUP_NAME_LABEL, NAME_LABEL, ROLE_ID_LABEL, ROLE_LABEL, owned_by, owner_ref};
use kthena_api::QuantityAmount as Amount;

/// Scheduler name that turns gang scheduling on.
pub(crate) const VOLCANO: &str = "volcano";
/// Annotation on pods and PodGroups: the PodGroup (= ServingGroup) name.
pub(crate) const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Annotation on pods: the Volcano task, the role id `<role>-<r>`.
pub(crate) const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";
/// ModelServing annotation naming the Volcano queue of its PodGroups.
pub(crate) const QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";

/// True when `ms` is gang scheduled: the PodGroup CRD exists (`crd_present`) and
/// `spec.schedulerName` is `volcano` (the default).
#[must_use]
pub(crate) fn gang_scheduled(ms: &ModelServing, crd_present: bool) -> bool {
    crd_present && ms.spec.scheduler_name.as_deref().unwrap_or(VOLCANO) == VOLCANO
}

/// Role replicas that must be placed together: `min(gangPolicy.minRoleReplicas[role],
/// role.replicas)` when the role is listed, else `role.replicas` (default 1).
#[must_use]
pub(crate) fn min_role_replicas(ms: &ModelServing, role: &Role) -> i32 {
    let replicas = role.replicas.unwrap_or(1);
    let policy = ms.spec.template.gang_policy.as_ref();
    let min = policy.and_then(|g| g.min_role_replicas.as_ref()?.get(&role.name).copied());
    min.map_or(replicas, |m| m.min(replicas))
}

/// The PodGroup of ServingGroup `group` (Go `generatePodGroup`): name = group name, labels
/// {`modelserving.volcano.sh/name`, `modelserving.volcano.sh/group-name`}, annotation
/// `scheduling.k8s.io/group-name: <group>`, the controller owner reference, and
/// * `minMember` = Σ_roles (1 + workerReplicas) × [`min_role_replicas`];
/// * `minResources` = Σ_roles min replicas × (entry container requests + workerReplicas ×
///   worker container requests), init containers not counted;
/// * `queue` from the ModelServing annotation `scheduling.volcano.sh/queue-name`;
/// * `networkTopology` = `template.networkTopology.groupPolicy`;
/// * `subGroupPolicy`, one per role: name = role, pods with labels {name, role}, split by
///   `role-id`, `subGroupSize` = 1 + workerReplicas, `minSubGroups` = min replicas,
///   `networkTopology` = `template.networkTopology.rolePolicy`; only when `sub_groups`
///   (the CRD's schema has `spec.subGroupPolicy`, see [`crd_has_sub_groups`]).
#[must_use]
pub(crate) fn pod_group(ms: &ModelServing, group: &str, sub_groups: bool) -> PodGroup {
    let name = ms.name_any();
    let roles = &ms.spec.template.roles;
    let topology = ms.spec.template.network_topology.as_ref();
    let role_topology = topology.and_then(|t| t.role_policy.as_ref()).map(to_value);
    let min_member = roles
        .iter()
        .map(|r| (1 + r.worker_replicas) * min_role_replicas(ms, r))
        .sum();
    let sub_group_policy = roles
        .iter()
        .filter(|_| sub_groups)
        .map(|role| SubGroupPolicy {
            name: role.name.clone(),
            label_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([
                    (NAME_LABEL.to_owned(), name.clone()),
                    (ROLE_LABEL.to_owned(), role.name.clone()),
                ])),
                match_expressions: None,
            }),
            match_label_keys: vec![ROLE_ID_LABEL.to_owned()],
            sub_group_size: Some(1 + role.worker_replicas),
            min_sub_groups: Some(min_role_replicas(ms, role)),
            network_topology: role_topology.clone(),
        })
        .collect();
    PodGroup {
        metadata: ObjectMeta {
            name: Some(group.to_owned()),
            namespace: ms.namespace(),
            labels: Some(BTreeMap::from([
                (NAME_LABEL.to_owned(), name),
                (GROUP_NAME_LABEL.to_owned(), group.to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(
                GROUP_NAME_ANNOTATION.to_owned(),
                group.to_owned(),
            )])),
            owner_references: Some(vec![owner_ref(ms)]),
            ..ObjectMeta::default()
        },
        spec: PodGroupSpec {
            min_member: Some(min_member),
            min_resources: Some(min_resources(ms)),
            queue: ms.annotations().get(QUEUE_ANNOTATION).cloned(),
            network_topology: topology.and_then(|t| t.group_policy.as_ref()).map(to_value),
            sub_group_policy,
            ..PodGroupSpec::default()
        },
        status: None,
    }
}

fn to_value(spec: &NetworkTopologySpec) -> serde_json::Value {
    serde_json::to_value(spec).unwrap_or_default()
}

/// Go's `calculateRequirements`: Σ_roles min replicas × (entry requests + workerReplicas ×
/// worker requests), per resource name; quantities that do not parse count as 0.
fn min_resources(
    ms: &ModelServing,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    let mut total: BTreeMap<String, Amount> = BTreeMap::new();
    let mut add = |template: Option<&PodTemplateSpec>, times: i128| {
        let spec = template.and_then(|t| t.spec.as_ref());
        for c in spec
            .map(|s: &PodSpec| s.containers.as_slice())
            .unwrap_or_default()
        {
            let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            for (resource, q) in requests.into_iter().flatten() {
                let amount = Amount::parse(q).unwrap_or_default();
                let first = !total.contains_key(resource);
                let sum = total.entry(resource.clone()).or_default();
                *sum = sum.add(amount, times, first);
            }
        }
    };
    for role in &ms.spec.template.roles {
        let min = i128::from(min_role_replicas(ms, role));
        add(Some(&role.entry_template), min);
        let workers = min * i128::from(role.worker_replicas);
        add(role.worker_template.as_ref(), workers);
    }
    total
        .into_iter()
        .map(|(k, v)| (k, v.to_quantity()))
        .collect()
}

/// Adds Go's Volcano annotations to a pod of a gang-scheduled ModelServing, from its
/// labels: `scheduling.k8s.io/group-name: <group>` and `volcano.sh/task-spec: <role>-<r>`.
pub(crate) fn annotate_pod(pod: &mut Pod) {
    let labels = pod.labels().clone();
    let annotations = pod.annotations_mut();
    if let Some(group) = labels.get(GROUP_NAME_LABEL) {
        annotations.insert(GROUP_NAME_ANNOTATION.to_owned(), group.clone());
    }
    if let Some(id) = labels.get(ROLE_ID_LABEL) {
        annotations.insert(TASK_SPEC_ANNOTATION.to_owned(), id.clone());
    }
}

/// True when the PodGroup CRD's `v1beta1` schema has `spec.subGroupPolicy` (Volcano releases
/// with sub-groups; Go checks the same before writing the field). A CRD without a schema for
/// `spec` counts as having it.
#[must_use]
pub(crate) fn crd_has_sub_groups(crd: &CustomResourceDefinition) -> bool {
    let Some(version) = crd.spec.versions.iter().find(|v| v.name == "v1beta1") else {
        return false;
    };
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    let spec = schema.and_then(|s| s.properties.as_ref()?.get("spec"));
    match spec.and_then(|s| s.properties.as_ref()) {
        Some(props) => props.contains_key("subGroupPolicy"),
        None => true,
    }
}

/// What to do with PodGroups in one reconcile: create and update them before the pods,
/// delete those of ServingGroups that are gone or being deleted.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodGroupPlan {
    /// PodGroups to create.
    pub create: Vec<PodGroup>,
    /// Existing PodGroups with the managed spec fields replaced (resourceVersion kept).
    pub update: Vec<PodGroup>,
    /// Names of PodGroups to delete.
    pub delete: Vec<String>,
    /// Names of PodGroups owned by another ModelServing (Go requeues after 1 s).
    pub foreign: Vec<String>,
}

/// Plans the PodGroups of `ms` (defaults applied): `groups` are the ServingGroups that exist
/// or are being created and are not being deleted; `existing` the PodGroups labelled with
/// the ModelServing's name. A PodGroup is updated when `minMember`, `minResources`,
/// `networkTopology`, `subGroupPolicy` or `queue` differ (Go's list); owned PodGroups of
/// other ServingGroups are deleted.
#[must_use]
pub(crate) fn plan_pod_groups(
    ms: &ModelServing,
    groups: &BTreeSet<String>,
    existing: &[PodGroup],
    sub_groups: bool,
) -> PodGroupPlan {
    let uid = ms.uid().unwrap_or_default();
    let mut plan = PodGroupPlan::default();
    let by_name: BTreeMap<String, &PodGroup> =
        existing.iter().map(|pg| (pg.name_any(), pg)).collect();
    for group in groups {
        let want = pod_group(ms, group, sub_groups);
        match by_name.get(group) {
            None => plan.create.push(want),
            Some(have) if !owned_by(Some(have.owner_references()), &uid) => {
                plan.foreign.push(group.clone());
            }
            Some(have) if have.metadata.deletion_timestamp.is_some() => {}
            Some(have) => {
                let (w, h) = (&want.spec, &have.spec);
                let same = w.min_member == h.min_member
                    && w.min_resources == h.min_resources
                    && w.network_topology == h.network_topology
                    && w.sub_group_policy == h.sub_group_policy
                    && w.queue == h.queue;
                if !same {
                    let mut updated = (*have).clone();
                    updated.spec.min_member = w.min_member;
                    updated.spec.min_resources.clone_from(&w.min_resources);
                    updated
                        .spec
                        .network_topology
                        .clone_from(&w.network_topology);
                    updated
                        .spec
                        .sub_group_policy
                        .clone_from(&w.sub_group_policy);
                    updated.spec.queue.clone_from(&w.queue);
                    plan.update.push(updated);
                }
            }
        }
    }
    for (name, pg) in &by_name {
        let owned = owned_by(Some(pg.owner_references()), &uid);
        if owned && !groups.contains(name) && pg.metadata.deletion_timestamp.is_none() {
            plan.delete.push(name.clone());
        }
    }
    plan
}

#[cfg(test)]
mod tests;
