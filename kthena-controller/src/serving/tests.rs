//! Unit tests of the reconcile plan and the status, on Kthena's example ModelServings.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kthena_api::workload::{RecoveryPolicy, RollingUpdateConfiguration, RolloutStrategy};
use kube::ResourceExt as _;

use crate::serving::observed::{Observed, ReplicaStatus};
use crate::serving::plan::{plan, scale_down_order};
use crate::serving::status::status;
use crate::serving::view::{GroupView, scaled_value};
use crate::testutil::{TestResult, multi_node, observed_pod, sample};

/// All pods of sample group `g` (2 roles × `roles` replicas × 4 pods), Ready unless listed
/// in `not_ready` as `(role, r)`; deletion cost on pod 0 of `(role, r, cost)`.
fn sample_group(
    g: u32,
    roles: u32,
    not_ready: &[(&str, u32)],
    costs: &[(&str, u32, &str)],
) -> Vec<Pod> {
    let group = format!("sample-{g}");
    let mut pods = Vec::new();
    for role in ["prefill", "decode"] {
        for r in 0..roles {
            for i in 0..4 {
                let ready = !not_ready.contains(&(role, r));
                let cost = costs
                    .iter()
                    .find(|c| c.0 == role && c.1 == r && i == 0)
                    .map(|c| c.2);
                pods.push(observed_pod("sample", &group, role, r, i, ready, cost));
            }
        }
    }
    pods
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::UNIX_EPOCH
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(|p| p.name_any()).collect()
}

#[test]
fn new_sample_creates_one_group_entry_first() -> crate::testutil::TestResult {
    let ms = sample()?;
    let p = plan(&ms, &Observed::default(), now())?;
    assert_eq!(
        names(&p.create_pods),
        [
            "sample-0-prefill-0-0",
            "sample-0-prefill-0-1",
            "sample-0-prefill-0-2",
            "sample-0-prefill-0-3",
            "sample-0-decode-0-0",
            "sample-0-decode-0-1",
            "sample-0-decode-0-2",
            "sample-0-decode-0-3",
        ]
    );
    let svcs: Vec<_> = p.create_services.iter().map(|s| s.name_any()).collect();
    assert_eq!(svcs, ["sample-0-prefill-0-0", "sample-0-decode-0-0"]);
    assert!(p.delete_groups.is_empty() && p.delete_roles.is_empty());
    let view = GroupView {
        ordinal: 0,
        revision: p.revision.clone(),
        status: ReplicaStatus::Creating,
    };
    assert_eq!(p.groups, [view]);
    Ok(())
}

#[test]
fn multi_node_creates_two_role_replicas() -> crate::testutil::TestResult {
    let ms = multi_node()?;
    let p = plan(&ms, &Observed::default(), now())?;
    assert_eq!(
        names(&p.create_pods),
        [
            "llama-multinode-0-llama-405b-0-0",
            "llama-multinode-0-llama-405b-0-1",
            "llama-multinode-0-llama-405b-1-0",
            "llama-multinode-0-llama-405b-1-1",
        ]
    );
    let env = p.create_pods[3].spec.clone().unwrap_or_default().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    let env: Vec<_> = env
        .iter()
        .map(|e| format!("{}={}", e.name, e.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        env,
        [
            "HUGGING_FACE_HUB_TOKEN=$HUGGING_FACE_HUB_TOKEN",
            "GROUP_SIZE=2",
            "ENTRY_ADDRESS=llama-multinode-0-llama-405b-1-0.ns1",
            "WORKER_INDEX=1",
        ]
    );
    assert_eq!(p.create_services.len(), 2);
    Ok(())
}

#[test]
fn steady_state_plans_nothing() -> crate::testutil::TestResult {
    let ms = sample()?;
    let mut seen = Observed::new("sample", "uid-1", &sample_group(0, 1, &[], &[]), &[]);
    seen.services.extend([
        "sample-0-prefill-0-0".to_owned(),
        "sample-0-decode-0-0".to_owned(),
    ]);
    let p = plan(&ms, &seen, now())?;
    assert!(p.create_pods.is_empty() && p.create_services.is_empty());
    assert!(p.delete_groups.is_empty() && p.delete_roles.is_empty());
    assert_eq!(p.groups[0].status, ReplicaStatus::Running);
    Ok(())
}

#[test]
fn groups_scale_down_in_gos_order() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    let mut pods = sample_group(0, 1, &[], &[]);
    pods.extend(sample_group(1, 1, &[], &[("decode", 0, "10")]));
    pods.extend(sample_group(
        2,
        1,
        &[("prefill", 0)],
        &[("decode", 0, "100")],
    ));
    pods.extend(sample_group(3, 1, &[], &[]));
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    // Not Running first (2), then the cheapest, highest ordinal (3 before 0; 1 costs 10).
    assert_eq!(p.delete_groups, ["sample-2", "sample-3"]);
    let st: Vec<_> = p.groups.iter().map(|g| g.status).collect();
    use ReplicaStatus::{Deleting, Running};
    assert_eq!(st, [Running, Running, Deleting, Deleting]);
    // A partition protects ordinals [0, 2): they go last, highest ordinal first.
    ms.spec.replicas = Some(1);
    ms.spec.rollout_strategy = Some(RolloutStrategy {
        rolling_update_configuration: Some(RollingUpdateConfiguration {
            partition: Some(IntOrString::Int(2)),
            max_unavailable: None,
        }),
        ..RolloutStrategy::default()
    });
    let pods = [
        sample_group(0, 1, &[], &[]),
        sample_group(1, 1, &[], &[]),
        sample_group(2, 1, &[], &[]),
    ]
    .concat();
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    assert_eq!(p.delete_groups, ["sample-2", "sample-1"]);
    Ok(())
}

#[test]
fn scale_up_fills_lowest_missing_ordinal() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(3);
    let pods = [sample_group(0, 1, &[], &[]), sample_group(2, 1, &[], &[])].concat();
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    let groups: Vec<_> = p
        .create_pods
        .iter()
        .map(|p| p.labels()["modelserving.volcano.sh/group-name"].clone())
        .collect();
    assert_eq!(groups, vec!["sample-1"; 8]);
    Ok(())
}

#[test]
fn roles_scale_down_in_gos_order_and_up_lowest_first() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    ms.spec.template.roles[0].replicas = Some(1);
    ms.spec.template.roles[1].replicas = Some(3);
    ms.spec.recovery_policy = Some(RecoveryPolicy::None);
    // prefill has replicas 0, 1, 2: 1 is not ready, 2 costs 5, 0 costs 0.
    let mut pods = sample_group(0, 3, &[("prefill", 1)], &[("prefill", 2, "5")]);
    // decode has 0 and 2 (1 deleted): 1 is created.
    pods.retain(|p| !p.name_any().starts_with("sample-0-decode-1-"));
    // one worker of decode-2 is gone: recreated.
    pods.retain(|p| p.name_any() != "sample-0-decode-2-3");
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    let deleted: Vec<_> = p.delete_roles.iter().map(|r| r.role_id.as_str()).collect();
    assert_eq!(deleted, ["prefill-1", "prefill-0"]);
    assert_eq!(
        names(&p.create_pods),
        [
            "sample-0-decode-2-3",
            "sample-0-decode-1-0",
            "sample-0-decode-1-1",
            "sample-0-decode-1-2",
            "sample-0-decode-1-3"
        ]
    );
    Ok(())
}

#[test]
fn scale_down_order_keys() {
    use ReplicaStatus::{Creating, Running};
    let items = [
        (0, Running, 0),
        (1, Creating, 9),
        (2, Running, -3),
        (3, Running, 0),
    ];
    assert_eq!(scale_down_order(&items, 0, 4), [1, 2, 3, 0]);
    assert_eq!(scale_down_order(&items, 2, 4), [2, 3, 1, 0]);
    assert_eq!(
        scaled_value(&IntOrString::String("50%".to_owned()), 3, true),
        2
    );
    assert_eq!(
        scaled_value(&IntOrString::String("50%".to_owned()), 3, false),
        1
    );
}

fn t(s: &str) -> crate::testutil::TestResult<Time> {
    Ok(Time(s.parse()?))
}

#[test]
fn status_available_when_all_groups_run() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    let rev = "rev1";
    let creating = [GroupView {
        ordinal: 0,
        revision: rev.to_owned(),
        status: ReplicaStatus::Creating,
    }];
    let st = status(&ms, &creating, rev, &t("2026-01-01T00:00:00Z")?);
    assert_eq!(
        (
            st.replicas,
            st.available_replicas,
            st.updated_replicas,
            st.current_replicas
        ),
        (1, Some(0), Some(1), Some(0))
    );
    assert_eq!(st.observed_generation, Some(3));
    assert_eq!(
        (
            st.current_revision.as_deref(),
            st.update_revision.as_deref()
        ),
        (Some(rev), Some(rev))
    );
    assert_eq!(st.conditions.len(), 1);
    let c = &st.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Progressing", "True", "GroupProgressing")
    );
    assert_eq!(c.message, "Some groups is progressing: [0]");
    assert_eq!(
        st.label_selector.as_deref(),
        Some(
            "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name=sample,modelserving.volcano.sh/role=prefill,modelserving.volcano.sh/role-id=prefill-0"
        )
    );
    ms.status = Some(st);
    let running = [GroupView {
        ordinal: 0,
        revision: rev.to_owned(),
        status: ReplicaStatus::Running,
    }];
    let st = status(&ms, &running, rev, &t("2026-01-01T00:01:00Z")?);
    assert_eq!(
        (
            st.replicas,
            st.available_replicas,
            st.updated_replicas,
            st.current_replicas
        ),
        (1, Some(1), Some(1), Some(1))
    );
    let conds: Vec<_> = st
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(conds, [("Progressing", "False"), ("Available", "True")]);
    assert_eq!(st.conditions[1].message, "All Serving groups are ready");
    assert_eq!(st.conditions[1].reason, "AllGroupsReady");
    // Regression: Progressing turned False kept its reason and message ("Some groups is
    // progressing"), as Go's SetCondition does; it now says why it is False, since when.
    assert_eq!(st.conditions[0].reason, "AllGroupsReady");
    assert_eq!(st.conditions[0].message, "All Serving groups are ready");
    assert_eq!(
        st.conditions[0].last_transition_time,
        t("2026-01-01T00:01:00Z")?
    );
    // A second pass with the same groups changes nothing.
    ms.status = Some(st.clone());
    assert_eq!(status(&ms, &running, rev, &t("2026-01-01T00:02:00Z")?), st);
    Ok(())
}

#[test]
fn status_counts_deleting_and_old_revisions() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    let g = |o, rev: &str, status| GroupView {
        ordinal: o,
        revision: rev.to_owned(),
        status,
    };
    use ReplicaStatus::{Deleting, Running};
    let groups = [
        g(0, "old", Running),
        g(1, "new", Running),
        g(2, "new", Deleting),
    ];
    let st = status(&ms, &groups, "new", &t("2026-01-01T00:00:00Z")?);
    assert_eq!(
        (
            st.replicas,
            st.available_replicas,
            st.updated_replicas,
            st.current_replicas
        ),
        (3, Some(2), Some(1), Some(1))
    );
    assert_eq!(st.current_revision.as_deref(), Some("old"));
    let c = &st.conditions[0];
    assert_eq!(
        (c.type_.as_str(), c.reason.as_str()),
        ("UpdateInProgress", "GroupsUpdating")
    );
    assert_eq!(
        c.message,
        "Some groups is progressing: [2], Updated Groups are: [1]"
    );
    // The only old group is being deleted: currentRevision stays until it is recreated.
    ms.status = Some(st);
    let groups = [g(0, "old", Deleting), g(1, "new", Running)];
    let st = status(&ms, &groups, "new", &t("2026-01-01T00:00:01Z")?);
    assert_eq!(st.current_revision.as_deref(), Some("old"));
    ms.status = Some(st);
    let groups = [g(0, "new", Running), g(1, "new", Running)];
    let st = status(&ms, &groups, "new", &t("2026-01-01T00:00:02Z")?);
    assert_eq!(st.current_revision.as_deref(), Some("new"));
    Ok(())
}

#[test]
fn a_lost_pod_is_recovered_by_the_recovery_policy() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    let mut pods = [sample_group(0, 1, &[], &[]), sample_group(1, 1, &[], &[])].concat();
    pods.retain(|p| p.name_any() != "sample-1-decode-0-2");
    let seen = Observed::new("sample", "uid-1", &pods, &[]);
    // RoleRecreate (the default): the role replica goes, nothing else; recreated once gone.
    let p = plan(&ms, &seen, now())?;
    let deleted: Vec<_> = p
        .delete_roles
        .iter()
        .map(|r| format!("{}/{}", r.group, r.role_id))
        .collect();
    assert_eq!(deleted, ["sample-1/decode-0"]);
    assert!(p.create_pods.is_empty() && p.delete_groups.is_empty());
    let mut gone = pods.clone();
    gone.retain(|p| !p.name_any().starts_with("sample-1-decode-0-"));
    let p = plan(&ms, &Observed::new("sample", "uid-1", &gone, &[]), now())?;
    assert_eq!(
        names(&p.create_pods),
        [
            "sample-1-decode-0-0",
            "sample-1-decode-0-1",
            "sample-1-decode-0-2",
            "sample-1-decode-0-3"
        ]
    );
    // ServingGroupRecreate: the whole group goes, and is recreated once gone.
    ms.spec.recovery_policy = Some(RecoveryPolicy::ServingGroupRecreate);
    let p = plan(&ms, &seen, now())?;
    assert_eq!(p.delete_groups, ["sample-1"]);
    assert!(p.create_pods.is_empty() && p.delete_roles.is_empty());
    assert_eq!(p.groups[1].status, ReplicaStatus::Deleting);
    let group0 = sample_group(0, 1, &[], &[]);
    let p = plan(&ms, &Observed::new("sample", "uid-1", &group0, &[]), now())?;
    assert_eq!(p.create_pods.len(), 8);
    // None: only the missing pod is recreated.
    ms.spec.recovery_policy = Some(RecoveryPolicy::None);
    let p = plan(&ms, &seen, now())?;
    assert_eq!(names(&p.create_pods), ["sample-1-decode-0-2"]);
    assert!(p.delete_roles.is_empty() && p.delete_groups.is_empty());
    Ok(())
}

/// A pod whose create the API server refused is created again, whatever the recovery
/// policy, and the pods of its role replica that exist are kept: before, a refused worker
/// counted as lost and its entry pod was deleted and recreated about 10 times a second.
#[test]
fn a_refused_pod_is_created_again_and_its_replica_kept() -> crate::testutil::TestResult {
    let mut ms = sample()?;
    let mut pods = sample_group(0, 1, &[], &[]);
    pods.retain(|p| {
        !p.name_any().starts_with("sample-0-decode-0-") || p.name_any().ends_with("-0")
    });
    let mut seen = Observed::new("sample", "uid-1", &pods, &[]);
    seen.not_created = [
        "sample-0-decode-0-1",
        "sample-0-decode-0-2",
        "sample-0-decode-0-3",
    ]
    .map(str::to_owned)
    .into();
    for policy in [
        RecoveryPolicy::RoleRecreate,
        RecoveryPolicy::ServingGroupRecreate,
        RecoveryPolicy::None,
    ] {
        ms.spec.recovery_policy = Some(policy);
        let p = plan(&ms, &seen, now())?;
        assert_eq!(
            names(&p.create_pods),
            [
                "sample-0-decode-0-1",
                "sample-0-decode-0-2",
                "sample-0-decode-0-3"
            ],
            "{policy:?}"
        );
        assert!(
            p.delete_roles.is_empty(),
            "{policy:?}: {:?}",
            p.delete_roles
        );
        assert!(
            p.delete_groups.is_empty() && p.delete_pods.is_empty(),
            "{policy:?}"
        );
        assert_eq!(p.groups[0].status, ReplicaStatus::Creating, "{policy:?}");
    }
    // A pod of the record that is lost again after it existed: recovered as any lost pod.
    seen.not_created.remove("sample-0-decode-0-3");
    ms.spec.recovery_policy = Some(RecoveryPolicy::RoleRecreate);
    let p = plan(&ms, &seen, now())?;
    let deleted: Vec<_> = p.delete_roles.iter().map(|r| r.role_id.as_str()).collect();
    assert_eq!(deleted, ["decode-0"]);
    assert!(p.create_pods.is_empty());
    Ok(())
}

#[test]
fn terminating_replicas_keep_their_ordinal_until_gone() -> crate::testutil::TestResult {
    let ms = sample()?;
    let mut pods = sample_group(0, 1, &[], &[]);
    for p in pods
        .iter_mut()
        .filter(|p| p.name_any().starts_with("sample-0-prefill-"))
    {
        p.metadata.deletion_timestamp = Some(Time(now()));
    }
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    assert!(p.create_pods.is_empty() && p.delete_roles.is_empty());
    for p in &mut pods {
        p.metadata.deletion_timestamp = Some(Time(now()));
    }
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    assert!(p.create_pods.is_empty() && p.delete_groups.is_empty());
    assert_eq!(p.groups[0].status, ReplicaStatus::Deleting);
    Ok(())
}

#[test]
fn a_template_change_replaces_groups_one_at_a_time() -> TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    let mut pods = [sample_group(0, 1, &[], &[]), sample_group(1, 1, &[], &[])].concat();
    for p in &mut pods {
        p.labels_mut().insert(
            "modelserving.volcano.sh/revision".to_owned(),
            "old".to_owned(),
        );
    }
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    assert_eq!(p.delete_groups, ["sample-1"]);
    assert!(p.create_pods.is_empty());
    let st: Vec<_> = p.groups.iter().map(|g| g.status).collect();
    assert_eq!(st, [ReplicaStatus::Running, ReplicaStatus::Deleting]);
    // Once gone, group 1 is recreated at the new revision; group 0 waits for it.
    pods.retain(|p| !p.name_any().starts_with("sample-1-"));
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    assert!(p.delete_groups.is_empty());
    assert_eq!(p.create_pods.len(), 8);
    let revision = &p.create_pods[0].labels()["modelserving.volcano.sh/revision"];
    assert_eq!(revision, &p.revision);
    Ok(())
}

#[test]
fn a_deleted_protected_group_comes_back_at_the_old_revision() -> TestResult {
    // Revision "old" had image nginx:old; the template now differs; partition 1 protects
    // group 0, which is gone (deleted by hand or by ServingGroupRecreate).
    let mut old_ms = sample()?;
    for role in &mut old_ms.spec.template.roles {
        let spec = role.entry_template.spec.get_or_insert_default();
        spec.containers[0].image = Some("nginx:old".to_owned());
    }
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    ms.spec.rollout_strategy = Some(RolloutStrategy {
        rolling_update_configuration: Some(RollingUpdateConfiguration {
            partition: Some(IntOrString::Int(1)),
            ..RollingUpdateConfiguration::default()
        }),
        ..RolloutStrategy::default()
    });
    // The old revision had 2 prefill replicas; the spec's 1 wins (scaling is no update).
    old_ms.spec.template.roles[0].replicas = Some(2);
    ms.status.get_or_insert_default().current_revision = Some("old".to_owned());
    let pods = sample_group(1, 1, &[], &[]);
    let mut seen = Observed::new("sample", "uid-1", &pods, &[]);
    seen.current = Some(crate::serving::observed::RecordedRevision {
        revision: "old".to_owned(),
        roles: old_ms.spec.template.roles.clone(),
    });
    let p = plan(&ms, &seen, now())?;
    let mut created = names(&p.create_pods);
    created.sort();
    let want: Vec<String> = ["decode", "prefill"]
        .iter()
        .flat_map(|r| (0..4).map(move |i| format!("sample-0-{r}-0-{i}")))
        .collect();
    assert_eq!(created, want);
    let old_hash = crate::serving::revision::role_template_hash(&old_ms.spec.template.roles[1])?;
    for pod in &p.create_pods {
        assert_eq!(pod.labels()["modelserving.volcano.sh/revision"], "old");
        let spec = pod.spec.clone().unwrap_or_default();
        let image = spec.containers[0].image.clone().unwrap_or_default();
        if pod.labels().contains_key("modelserving.volcano.sh/entry") {
            assert_eq!(image, "nginx:old", "{}", pod.name_any());
        }
    }
    let decode = p
        .create_pods
        .iter()
        .find(|p| p.name_any() == "sample-0-decode-0-0");
    let decode = decode.ok_or("no decode entry")?;
    assert_eq!(
        decode.labels()["modelserving.volcano.sh/role-template-hash"],
        old_hash
    );
    assert_eq!(p.groups[0].revision, "old");
    // Without the recorded revision (pruned, unreadable) Go falls back to the spec.
    seen.current = None;
    let p = plan(&ms, &seen, now())?;
    assert_eq!(
        p.create_pods[0].labels()["modelserving.volcano.sh/revision"],
        p.revision
    );
    // An existing protected group at the old revision that loses a role replica gets it
    // back from the old template too.
    let mut pods = [sample_group(0, 1, &[], &[]), sample_group(1, 1, &[], &[])].concat();
    for pod in pods
        .iter_mut()
        .filter(|p| p.name_any().starts_with("sample-0-"))
    {
        pod.labels_mut().insert(
            "modelserving.volcano.sh/revision".to_owned(),
            "old".to_owned(),
        );
    }
    pods.retain(|p| !p.name_any().starts_with("sample-0-decode-"));
    let mut seen = Observed::new("sample", "uid-1", &pods, &[]);
    seen.current = Some(crate::serving::observed::RecordedRevision {
        revision: "old".to_owned(),
        roles: old_ms.spec.template.roles.clone(),
    });
    let p = plan(&ms, &seen, now())?;
    assert_eq!(p.create_pods.len(), 4);
    assert!(p.create_pods.iter().all(|pod| {
        pod.labels()["modelserving.volcano.sh/revision"] == "old"
            && pod.labels()["modelserving.volcano.sh/role-template-hash"] == old_hash
    }));
    Ok(())
}

/// Regression: renaming the only role to a name that sorts first created the new role's
/// pods in an old group; the group's revision was read from its first pod (the new role's,
/// new revision), so it counted as updated and the old role's pods stayed for ever. A group
/// with pods of an older revision is not updated, and the rolling update replaces it.
#[test]
fn a_group_with_a_renamed_roles_old_pods_is_not_updated() -> TestResult {
    let mut ms = sample()?;
    ms.spec.replicas = Some(2);
    ms.spec.template.roles.truncate(1);
    ms.spec.template.roles[0].name = "p2".to_owned();
    let new = plan(&ms, &Observed::default(), now())?.revision;
    let revision = |mut p: Pod, rev: &str| {
        p.labels_mut().insert(
            "modelserving.volcano.sh/revision".to_owned(),
            rev.to_owned(),
        );
        p
    };
    let mut pods = Vec::new();
    for i in 0..4 {
        // Group 0: the new role's pods (listed first) and the old role's, at "old".
        pods.push(revision(
            observed_pod("sample", "sample-0", "p2", 0, i, true, None),
            &new,
        ));
        pods.push(revision(
            observed_pod("sample", "sample-0", "prefill", 0, i, true, None),
            "old",
        ));
        pods.push(revision(
            observed_pod("sample", "sample-1", "p2", 0, i, true, None),
            &new,
        ));
    }
    let p = plan(&ms, &Observed::new("sample", "uid-1", &pods, &[]), now())?;
    let revisions: Vec<_> = p.groups.iter().map(|g| g.revision.as_str()).collect();
    assert_eq!(revisions, ["old", new.as_str()]);
    assert_eq!(p.delete_groups, ["sample-0"]);
    Ok(())
}

/// Regression: a ModelServing whose groups went from ready to progressing showed
/// `Available=False` with reason `AllGroupsReady` and message "All Serving groups are ready".
#[test]
fn available_turned_false_says_which_groups_progress() -> TestResult {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    let cond = |type_: &str, reason: &str, message: &str, at: &str| -> TestResult<Condition> {
        Ok(Condition {
            type_: type_.to_owned(),
            status: "True".to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: t(at)?,
            observed_generation: None,
        })
    };
    let mut conds = vec![cond(
        crate::serving::status::AVAILABLE,
        "AllGroupsReady",
        "All Serving groups are ready",
        "2026-01-01T00:00:00Z",
    )?];
    let progressing = cond(
        crate::serving::status::PROGRESSING,
        "GroupProgressing",
        "Some groups is progressing: [1]",
        "2026-01-01T00:05:00Z",
    )?;
    crate::serving::status::set_condition(&mut conds, progressing.clone());
    let mut want = progressing.clone();
    want.type_ = crate::serving::status::AVAILABLE.to_owned();
    want.status = "False".to_owned();
    assert_eq!(conds, [want, progressing]);
    Ok(())
}
