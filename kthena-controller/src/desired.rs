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
pub struct RoleReplicaRef<'a> {
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
pub fn role_replica_pods(ms: &ModelServing, at: &RoleReplicaRef<'_>) -> Vec<Pod> {
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
pub fn headless_service(ms: &ModelServing, at: &RoleReplicaRef<'_>) -> Option<Service> {
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
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::testutil::sample;

    fn env_of(pod: &Pod, container: usize) -> Vec<(String, String)> {
        let spec = pod.spec.as_ref().map(|s| s.containers[container].clone());
        spec.and_then(|c| c.env)
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    fn at<'a>(role: &'a Role) -> RoleReplicaRef<'a> {
        RoleReplicaRef {
            group: "sample-0",
            role,
            ordinal: 1,
            revision: "rev1",
            role_hash: "hash1",
        }
    }

    #[test]
    fn entry_and_workers_with_gos_names_labels_env() -> crate::testutil::TestResult {
        let ms = sample()?;
        let role = &ms.spec.template.roles[0];
        let pods = role_replica_pods(&ms, &at(role));
        let names: Vec<_> = pods.iter().map(|p| p.name_any()).collect();
        assert_eq!(
            names,
            [
                "sample-0-prefill-1-0",
                "sample-0-prefill-1-1",
                "sample-0-prefill-1-2",
                "sample-0-prefill-1-3"
            ]
        );
        let want: BTreeMap<String, String> = [
            ("modelserving.volcano.sh/name", "sample"),
            ("modelserving.volcano.sh/group-name", "sample-0"),
            ("modelserving.volcano.sh/role", "prefill"),
            ("modelserving.volcano.sh/role-id", "prefill-1"),
            ("modelserving.volcano.sh/revision", "rev1"),
            ("modelserving.volcano.sh/role-template-hash", "hash1"),
            ("modelserving.volcano.sh/entry", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(pods[0].labels(), &want);
        let mut worker_labels = want;
        worker_labels.remove("modelserving.volcano.sh/entry");
        assert_eq!(pods[2].labels(), &worker_labels);
        let env = |i: &str| {
            vec![
                ("GROUP_SIZE".to_owned(), "4".to_owned()),
                (
                    "ENTRY_ADDRESS".to_owned(),
                    "sample-0-prefill-1-0.ns1".to_owned(),
                ),
                ("WORKER_INDEX".to_owned(), i.to_owned()),
            ]
        };
        assert_eq!(env_of(&pods[0], 0), env("0"));
        assert_eq!(env_of(&pods[3], 0), env("3"));
        let spec = pods[0].spec.clone().unwrap_or_default();
        assert_eq!(spec.scheduler_name.as_deref(), Some("volcano"));
        assert_eq!(spec.containers[0].name, "leader");
        assert_eq!(
            pods[1].spec.clone().unwrap_or_default().containers[0].name,
            "worker"
        );
        let owner = &pods[0].owner_references()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            (
                "workload.serving.volcano.sh/v1alpha1",
                "ModelServing",
                "sample",
                "uid-1"
            )
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        Ok(())
    }

    #[test]
    fn template_metadata_wins_and_env_is_replaced() -> crate::testutil::TestResult {
        let mut ms = sample()?;
        let role = &mut ms.spec.template.roles[1];
        role.entry_template.metadata = Some(ObjectMeta {
            labels: Some(BTreeMap::from([
                ("app".to_owned(), "x".to_owned()),
                (ROLE_LABEL.to_owned(), "mine".to_owned()),
            ])),
            annotations: Some(BTreeMap::from([("a".to_owned(), "b".to_owned())])),
            ..ObjectMeta::default()
        });
        let spec = role.entry_template.spec.get_or_insert_default();
        spec.containers[0].env = Some(vec![
            EnvVar {
                name: "WORKER_INDEX".to_owned(),
                value: Some("9".to_owned()),
                value_from: None,
            },
            EnvVar {
                name: "KEEP".to_owned(),
                value: Some("1".to_owned()),
                value_from: None,
            },
        ]);
        spec.init_containers = Some(vec![Container {
            name: "init".to_owned(),
            ..Container::default()
        }]);
        let role = ms.spec.template.roles[1].clone();
        let pods = role_replica_pods(&ms, &at(&role));
        assert_eq!(pods[0].labels()[ROLE_LABEL], "mine");
        assert_eq!(pods[0].labels()["app"], "x");
        assert_eq!(pods[0].annotations()["a"], "b");
        let names: Vec<_> = env_of(&pods[0], 0)
            .into_iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        assert_eq!(
            names,
            [
                "KEEP=1",
                "GROUP_SIZE=4",
                "ENTRY_ADDRESS=sample-0-decode-1-0.ns1",
                "WORKER_INDEX=0"
            ]
        );
        let init = pods[0]
            .spec
            .clone()
            .unwrap_or_default()
            .init_containers
            .unwrap_or_default();
        assert_eq!(init[0].env.as_ref().map(Vec::len), Some(3));
        Ok(())
    }

    #[test]
    fn headless_service_per_multi_pod_role_replica() -> crate::testutil::TestResult {
        let ms = sample()?;
        let role = &ms.spec.template.roles[0];
        let svc = headless_service(&ms, &at(role)).ok_or("no service")?;
        assert_eq!(svc.name_any(), "sample-0-prefill-1-0");
        let spec = svc.spec.clone().unwrap_or_default();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let sel = spec.selector.unwrap_or_default();
        assert_eq!(sel.len(), 4);
        assert_eq!(sel[ENTRY_LABEL], "true");
        assert_eq!(sel[ROLE_ID_LABEL], "prefill-1");
        assert_eq!(svc.labels().len(), 4);
        let mut single = role.clone();
        single.worker_replicas = 0;
        single.worker_template = None;
        assert!(headless_service(&ms, &at(&single)).is_none());
        assert_eq!(role_replica_pods(&ms, &at(&single)).len(), 1);
        Ok(())
    }
}
