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
