use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use super::*;
use crate::testutil::{TestResult, load, sample};

fn gang_policy() -> TestResult<ModelServing> {
    load(
        "gangPolicy.yaml",
        include_str!("../../../tests/fixtures/gangPolicy.yaml"),
    )
}

fn sub_group(ms: &str, role: &str, size: i32, min: i32) -> SubGroupPolicy {
    SubGroupPolicy {
        name: role.to_owned(),
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([
                (NAME_LABEL.to_owned(), ms.to_owned()),
                (ROLE_LABEL.to_owned(), role.to_owned()),
            ])),
            match_expressions: None,
        }),
        match_label_keys: vec![ROLE_ID_LABEL.to_owned()],
        sub_group_size: Some(size),
        min_sub_groups: Some(min),
        network_topology: None,
    }
}

#[test]
fn gang_policy_yaml_gives_gos_pod_group() -> TestResult {
    let ms = gang_policy()?;
    let pg = pod_group(&ms, "sample-0", true);
    assert_eq!(pg.name_any(), "sample-0");
    assert_eq!(pg.namespace().as_deref(), Some("ns1"));
    assert_eq!(
        pg.labels(),
        &BTreeMap::from([
            (NAME_LABEL.to_owned(), "sample".to_owned()),
            (GROUP_NAME_LABEL.to_owned(), "sample-0".to_owned()),
        ])
    );
    assert_eq!(pg.annotations()[GROUP_NAME_ANNOTATION], "sample-0");
    assert_eq!(pg.owner_references(), &[owner_ref(&ms)]);
    // prefill: min(2, 2) × (1 + 1); decode: min(1, 2) × (1 + 1).
    assert_eq!(pg.spec.min_member, Some(6));
    // 0.1 CPU per pod, 6 pods.
    assert_eq!(
        pg.spec.min_resources,
        Some(BTreeMap::from([(
            "cpu".to_owned(),
            Quantity("600m".to_owned())
        )]))
    );
    assert_eq!(
        pg.spec.sub_group_policy,
        vec![
            sub_group("sample", "prefill", 2, 2),
            sub_group("sample", "decode", 2, 1)
        ]
    );
    assert_eq!(pg.spec.network_topology, None);
    assert_eq!(pg.spec.queue, None);
    assert_eq!(pg.spec.min_task_member, None);
    let old = pod_group(&ms, "sample-0", false);
    assert!(old.spec.sub_group_policy.is_empty());
    assert_eq!(old.spec.min_member, Some(6));
    Ok(())
}

#[test]
fn sub_groups_follow_the_crd_schema() {
    use kube::CustomResourceExt as _;
    let mut crd = PodGroup::crd();
    assert!(crd_has_sub_groups(&crd));
    let spec = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut()?.get_mut("spec"))
        .and_then(|s| s.properties.as_mut());
    spec.map(|p| p.remove("subGroupPolicy"));
    assert!(!crd_has_sub_groups(&crd));
    crd.spec.versions[0].name = "v1alpha1".to_owned();
    assert!(!crd_has_sub_groups(&crd));
}

#[test]
fn network_topology_and_queue() -> TestResult {
    let mut ms = load(
        "network-topology.yaml",
        include_str!("../../../tests/fixtures/network-topology.yaml"),
    )?;
    ms.annotations_mut()
        .insert(QUEUE_ANNOTATION.to_owned(), "gpu".to_owned());
    let pg = pod_group(&ms, "sample-0", true);
    let hard = json!({"mode": "hard", "highestTierAllowed": 1});
    assert_eq!(pg.spec.network_topology, Some(hard.clone()));
    assert_eq!(pg.spec.queue.as_deref(), Some("gpu"));
    let topologies: Vec<_> = pg
        .spec
        .sub_group_policy
        .iter()
        .map(|s| s.network_topology.clone())
        .collect();
    assert_eq!(topologies, vec![Some(hard.clone()), Some(hard)]);
    Ok(())
}

#[test]
fn without_gang_policy_every_role_replica_counts() -> TestResult {
    let ms = sample()?;
    // sample.yaml: prefill and decode, 1 replica of 1 entry + 3 workers each.
    let pg = pod_group(&ms, "sample-1", true);
    assert_eq!(pg.spec.min_member, Some(8));
    assert!(gang_scheduled(&ms, true));
    assert!(!gang_scheduled(&ms, false));
    let mut other = ms;
    other.spec.scheduler_name = Some("default-scheduler".to_owned());
    assert!(!gang_scheduled(&other, true));
    Ok(())
}

#[test]
fn pods_carry_group_and_task_annotations() -> TestResult {
    let mut pod = crate::testutil::observed_pod("sample", "sample-0", "decode", 1, 2, true, None);
    annotate_pod(&mut pod);
    assert_eq!(pod.annotations()[GROUP_NAME_ANNOTATION], "sample-0");
    assert_eq!(pod.annotations()[TASK_SPEC_ANNOTATION], "decode-1");
    Ok(())
}

#[test]
fn plan_creates_updates_and_deletes() -> TestResult {
    let ms = gang_policy()?;
    let groups: BTreeSet<String> = ["sample-0", "sample-1", "sample-2"]
        .map(str::to_owned)
        .into();
    let same = pod_group(&ms, "sample-0", true);
    let mut stale = pod_group(&ms, "sample-1", true);
    stale.spec.min_member = Some(1);
    stale.spec.priority_class_name = Some("high".to_owned());
    stale.metadata.resource_version = Some("7".to_owned());
    let gone = pod_group(&ms, "sample-3", true);
    let mut foreign = pod_group(&ms, "sample-2", true);
    foreign.metadata.owner_references = None;
    let plan = plan_pod_groups(&ms, &groups, &[same, stale, gone, foreign], true);
    assert!(plan.create.is_empty());
    assert_eq!(plan.update.len(), 1);
    let updated = &plan.update[0];
    assert_eq!(updated.spec.min_member, Some(6));
    assert_eq!(updated.spec.priority_class_name.as_deref(), Some("high"));
    assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(plan.delete, ["sample-3"]);
    assert_eq!(plan.foreign, ["sample-2"]);
    let fresh = plan_pod_groups(&ms, &groups, &[], true);
    let names: Vec<_> = fresh.create.iter().map(|pg| pg.name_any()).collect();
    assert_eq!(names, ["sample-0", "sample-1", "sample-2"]);
    Ok(())
}
