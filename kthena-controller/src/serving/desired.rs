//! The pods and headless services of one role replica, built from the ModelServing
//! (Go Kthena `utils.GenerateEntryPod`, `GenerateWorkerPod`, `CreateHeadlessService`).

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodTemplateSpec, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kthena_api::ModelServing;
use kthena_api::workload::Role;
use kube::ResourceExt as _;

use crate::names::{
    ENTRY_ADDRESS_ENV, ENTRY_LABEL, GROUP_NAME_LABEL, GROUP_SIZE_ENV, REVISION_LABEL,
    ROLE_ID_LABEL, ROLE_LABEL, ROLE_TEMPLATE_HASH_LABEL, WORKER_INDEX_ENV, owner_ref, pod_name,
    role_id, role_labels,
};

/// Where a role replica sits: ServingGroup name, role, role ordinal, and the hashes its pods
/// are labelled with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RoleReplicaRef<'a> {
    /// ServingGroup name (`<ms>-<g>`).
    pub group: &'a str,
    /// The role (from the spec).
    pub role: &'a Role,
    /// Role ordinal `r` (role id `<role>-<r>`).
    pub ordinal: u32,
    /// ModelServing revision (label `revision`).
    pub revision: &'a str,
    /// Role template hash (label `role-template-hash`).
    pub role_hash: &'a str,
}

/// The `1 + workerReplicas` pods of a role replica, entry pod first (creation order).
///
/// Each pod: name `<group>-<role>-<r>-<i>`; labels name, group-name, role, role-id,
/// revision, role-template-hash (`entry: "true"` on the entry pod), then the template's
/// labels and annotations on top; the controller owner reference; the template's spec with
/// `schedulerName` of the ModelServing; env `GROUP_SIZE`, `ENTRY_ADDRESS`, `WORKER_INDEX`
/// appended to every container and init container, replacing same-named variables.
/// A role with `workerReplicas > 0` and no `workerTemplate` gets only its entry pod (Go logs
/// an error and creates no worker; the webhook forbids it).
#[must_use]
pub(crate) fn role_replica_pods(ms: &ModelServing, at: &RoleReplicaRef<'_>) -> Vec<Pod> {
    let id = role_id(&at.role.name, at.ordinal);
    let entry_name = pod_name(at.group, &id, 0);
    let namespace = ms.namespace().unwrap_or_default();
    let entry_address = format!("{entry_name}.{namespace}");
    let mut pods = vec![pod(ms, at, &at.role.entry_template, 0, &entry_address)];
    if let Some(worker) = &at.role.worker_template {
        let workers = u32::try_from(at.role.worker_replicas).unwrap_or(0);
        pods.extend((1..=workers).map(|i| pod(ms, at, worker, i, &entry_address)));
    }
    pods
}

fn pod(
    ms: &ModelServing,
    at: &RoleReplicaRef<'_>,
    template: &PodTemplateSpec,
    index: u32,
    entry_address: &str,
) -> Pod {
    let id = role_id(&at.role.name, at.ordinal);
    let mut labels = role_labels(&ms.name_any(), at.group, &at.role.name, &id);
    labels.insert(REVISION_LABEL.to_owned(), at.revision.to_owned());
    labels.insert(ROLE_TEMPLATE_HASH_LABEL.to_owned(), at.role_hash.to_owned());
    if index == 0 {
        labels.insert(ENTRY_LABEL.to_owned(), "true".to_owned());
    }
    let meta = template.metadata.clone().unwrap_or_default();
    labels.extend(meta.labels.unwrap_or_default());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.scheduler_name.clone_from(&ms.spec.scheduler_name);
    let env = [
        (GROUP_SIZE_ENV, (at.role.worker_replicas + 1).to_string()),
        (ENTRY_ADDRESS_ENV, entry_address.to_owned()),
        (WORKER_INDEX_ENV, index.to_string()),
    ];
    let containers = spec.containers.iter_mut();
    let init = spec.init_containers.iter_mut().flatten();
    for container in containers.chain(init) {
        set_env(container, &env);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(at.group, &id, index)),
            namespace: ms.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![owner_ref(ms)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Go's `addEnvVars`: drop same-named variables, append ours last.
fn set_env(container: &mut Container, vars: &[(&str, String)]) {
    let mut env: Vec<EnvVar> = container
        .env
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !vars.iter().any(|(name, _)| *name == e.name))
        .collect();
    env.extend(vars.iter().map(|(name, value)| EnvVar {
        name: (*name).to_owned(),
        value: Some(value.clone()),
        value_from: None,
    }));
    container.env = Some(env);
}

/// The headless Service of a role replica, or `None` when the role has no `workerTemplate`
/// (Go creates services only for multi-pod roles). Name = entry pod name, `clusterIP: None`,
/// `publishNotReadyAddresses: true`, selector {group-name, role, role-id, entry}, labels
/// {name, group-name, role, role-id}, the controller owner reference.
#[must_use]
pub(crate) fn headless_service(ms: &ModelServing, at: &RoleReplicaRef<'_>) -> Option<Service> {
    at.role.worker_template.as_ref()?;
    let id = role_id(&at.role.name, at.ordinal);
    let labels = role_labels(&ms.name_any(), at.group, &at.role.name, &id);
    let selector = [
        (GROUP_NAME_LABEL, at.group),
        (ROLE_LABEL, at.role.name.as_str()),
        (ROLE_ID_LABEL, id.as_str()),
        (ENTRY_LABEL, "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Some(Service {
        metadata: ObjectMeta {
            name: Some(pod_name(at.group, &id, 0)),
            namespace: ms.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner_ref(ms)]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests;
