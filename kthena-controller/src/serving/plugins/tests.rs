use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kthena_api::ModelServing;
use kthena_api::workload::{PluginScope, PluginSpec};
use kube::ResourceExt as _;
use serde_json::json;

use super::*;
use crate::serving::desired::{RoleReplicaRef, role_replica_pods};
use crate::testutil::{TestResult, multi_node, sample};

/// The pods of role replica 0 of the first role in group `<ms>-<group>`.
fn pods(ms: &ModelServing, group: u32) -> Vec<Pod> {
    let role = &ms.spec.template.roles[0];
    let name = format!("{}-{group}", ms.name_any());
    role_replica_pods(
        ms,
        &RoleReplicaRef {
            group: &name,
            role,
            ordinal: 0,
            revision: "rev",
            role_hash: "hash",
        },
    )
}

fn plugin(name: &str, config: serde_json::Value, scope: Option<PluginScope>) -> PluginSpec {
    PluginSpec {
        name: name.to_owned(),
        config: (!config.is_null()).then_some(config),
        scope,
        ..PluginSpec::default()
    }
}

fn owned_by_lws(mut ms: ModelServing, name: &str) -> ModelServing {
    ms.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "leaderworkerset.x-k8s.io/v1".to_owned(),
        kind: "LeaderWorkerSet".to_owned(),
        name: name.to_owned(),
        uid: "lws-uid".to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    ms
}

fn lws_labels(pod: &Pod) -> Vec<(&str, &str)> {
    pod.labels()
        .iter()
        .filter(|(k, _)| k.starts_with("leaderworkerset.sigs.k8s.io/"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[test]
fn the_builtin_registry_has_gos_two_plugins() {
    let names: Vec<_> = Registry::builtin().names().collect();
    assert_eq!(names, ["demo-pod-tweaks", "lws-standard-labels"]);
}

#[test]
fn group_key_is_the_sha1_of_name_and_group_index() {
    // `printf llama-multinode-0 | sha1sum`
    assert_eq!(
        group_key("llama-multinode", 0),
        "162c9bc36930c92a95aea11a736ad0abb3829ea4"
    );
    assert_eq!(
        group_key("llama-multinode", 1),
        "d87af4ba2c0fa1e3a34774f951d19d1500939499"
    );
}

#[test]
fn lws_labels_on_the_pods_of_a_modelserving_owned_by_a_leaderworkerset() -> TestResult {
    let mut ms = owned_by_lws(multi_node()?, "llama-multinode");
    ms.spec.plugins = vec![plugin(LWS_LABELS, json!(null), None)];
    let mut list = pods(&ms, 1);
    on_pod_create(&ms, &mut list)?;
    let key = "d87af4ba2c0fa1e3a34774f951d19d1500939499";
    assert_eq!(list.len(), 2);
    for (pod, worker) in list.iter().zip(["0", "1"]) {
        assert_eq!(
            lws_labels(pod),
            [
                ("leaderworkerset.sigs.k8s.io/group-index", "1"),
                ("leaderworkerset.sigs.k8s.io/group-key", key),
                ("leaderworkerset.sigs.k8s.io/name", "llama-multinode"),
                ("leaderworkerset.sigs.k8s.io/worker-index", worker),
            ],
            "{}",
            pod.name_any()
        );
        // The controller's own labels are untouched.
        assert_eq!(
            pod.labels()["modelserving.volcano.sh/group-name"],
            "llama-multinode-1"
        );
    }
    Ok(())
}

#[test]
fn lws_labels_do_nothing_without_a_leaderworkerset_owner() -> TestResult {
    let mut ms = multi_node()?;
    ms.spec.plugins = vec![plugin(LWS_LABELS, json!({"ignored": true}), None)];
    let before = pods(&ms, 0);
    let mut list = before.clone();
    on_pod_create(&ms, &mut list)?;
    assert_eq!(list, before);
    Ok(())
}

#[test]
fn lws_labels_errors_are_gos_messages() -> TestResult {
    let ms = owned_by_lws(multi_node()?, "x");
    let chain = Chain::new(
        Registry::builtin(),
        &[plugin(LWS_LABELS, json!(null), None)],
    )?;
    let mut pod = Pod::default();
    pod.metadata.name = Some("worker-x".to_owned());
    let req = HookRequest {
        model_serving: &ms,
        serving_group: "x-0",
        role_name: "r",
        role_id: "r-0",
        is_entry: false,
    };
    let err = chain
        .on_pod_create(&req, &mut pod)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "plugin lws-standard-labels OnPodCreate for pod worker-x: cannot derive worker-index from pod name \"worker-x\""
        )
    );
    let bad_group = HookRequest {
        serving_group: "nogroup",
        is_entry: true,
        ..req
    };
    let err = chain
        .on_pod_create(&bad_group, &mut pod)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "plugin lws-standard-labels OnPodCreate for pod worker-x: invalid servingGroup \"nogroup\" for pod worker-x"
        )
    );
    Ok(())
}

#[test]
fn a_failing_hook_drops_its_whole_role_replica_only() -> TestResult {
    let mut ms = owned_by_lws(multi_node()?, "llama-multinode");
    ms.spec.plugins = vec![plugin(LWS_LABELS, json!(null), None)];
    let role = &ms.spec.template.roles[0];
    let at = |ordinal| RoleReplicaRef {
        group: "llama-multinode-0",
        role,
        ordinal,
        revision: "rev",
        role_hash: "hash",
    };
    let mut list = role_replica_pods(&ms, &at(0));
    list.extend(role_replica_pods(&ms, &at(1)));
    // Replica 0's worker has a name without an index.
    list[1].metadata.name = Some("llama-multinode-0-llama-405b-0-x".to_owned());
    let err = on_pod_create(&ms, &mut list).err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "plugin lws-standard-labels OnPodCreate for pod llama-multinode-0-llama-405b-0-x: cannot derive worker-index from pod name \"llama-multinode-0-llama-405b-0-x\""
        )
    );
    let names: Vec<_> = list.iter().map(kube::ResourceExt::name_any).collect();
    assert_eq!(
        names,
        [
            "llama-multinode-0-llama-405b-1-0",
            "llama-multinode-0-llama-405b-1-1"
        ]
    );
    assert!(list.iter().all(|p| lws_labels(p).len() == 4));
    Ok(())
}

#[test]
fn demo_plugin_scoped_to_workers_of_one_role() -> TestResult {
    let mut ms = sample()?;
    let config = json!({
        "runtimeClassName": "nvidia",
        "annotations": {"example.com/custom": "value"},
        "env": [{"name": "CUSTOM_VAR", "value": "custom-value"}],
    });
    let scope = PluginScope {
        roles: vec!["prefill".to_owned()],
        target: Some("Worker".to_owned()),
    };
    ms.spec.plugins = vec![
        plugin(DEMO, config, Some(scope)),
        plugin(DEMO, json!({"annotations": {"all": "yes"}}), None),
    ];
    let mut list = pods(&ms, 0);
    let untouched = list.clone();
    on_pod_create(&ms, &mut list)?;
    let entry = &list[0];
    assert_eq!(
        entry.annotations(),
        &BTreeMap::from([("all".to_owned(), "yes".to_owned())])
    );
    let spec = entry.spec.clone().unwrap_or_default();
    assert_eq!(spec.runtime_class_name, None);
    assert_eq!(
        spec.containers,
        untouched[0].spec.clone().unwrap_or_default().containers
    );
    for worker in &list[1..] {
        let want = BTreeMap::from([
            ("all".to_owned(), "yes".to_owned()),
            ("example.com/custom".to_owned(), "value".to_owned()),
        ]);
        assert_eq!(worker.annotations(), &want);
        let spec = worker.spec.clone().unwrap_or_default();
        assert_eq!(spec.runtime_class_name.as_deref(), Some("nvidia"));
        let env: Vec<_> = spec.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        // Appended after the controller's variables.
        assert_eq!(
            env[env.len() - 4..],
            ["GROUP_SIZE", "ENTRY_ADDRESS", "WORKER_INDEX", "CUSTOM_VAR"]
        );
    }
    // The decode role is out of the first plugin's scope.
    let decode = &ms.spec.template.roles[1];
    let mut decode_pods = role_replica_pods(
        &ms,
        &RoleReplicaRef {
            group: "sample-0",
            role: decode,
            ordinal: 0,
            revision: "rev",
            role_hash: "hash",
        },
    );
    on_pod_create(&ms, &mut decode_pods)?;
    assert!(decode_pods.iter().all(|p| p.annotations().len() == 1));
    Ok(())
}

#[derive(Debug)]
struct Recording {
    name: &'static str,
    calls: &'static Mutex<Vec<String>>,
    fail: bool,
}

impl Plugin for Recording {
    fn name(&self) -> &str {
        self.name
    }

    fn on_pod_create(&self, req: &HookRequest<'_>, _pod: &mut Pod) -> Result<(), PluginError> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.push(format!("create-{}-{}", self.name, req.is_entry));
        match self.fail {
            true => Err(PluginError::WorkerIndex("boom".to_owned())),
            false => Ok(()),
        }
    }

    fn on_pod_ready(&self, _req: &HookRequest<'_>, _pod: &Pod) -> Result<(), PluginError> {
        let mut calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.push(format!("ready-{}", self.name));
        Ok(())
    }
}

#[test]
fn chain_order_and_scope_as_gos_manager_test() -> TestResult {
    static CALLS: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let p = |name| -> Box<dyn Plugin> {
        Box::new(Recording {
            name,
            calls: &CALLS,
            fail: false,
        })
    };
    let worker = PluginScope {
        roles: Vec::new(),
        target: Some("Worker".to_owned()),
    };
    let chain = Chain::from_plugins(vec![(p("p1"), None), (p("p2"), Some(worker))]);
    let ms = sample()?;
    let mut pod = Pod::default();
    let entry = HookRequest {
        model_serving: &ms,
        serving_group: "sample-0",
        role_name: "role",
        role_id: "role-0",
        is_entry: true,
    };
    chain.on_pod_create(&entry, &mut pod)?;
    let worker = HookRequest {
        is_entry: false,
        ..entry
    };
    chain.on_pod_create(&worker, &mut pod)?;
    chain.on_pod_ready(&worker, &pod)?;
    let calls = CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(
        *calls,
        [
            "create-p1-true",
            "create-p1-false",
            "create-p2-false",
            "ready-p1",
            "ready-p2"
        ]
    );
    Ok(())
}

#[test]
fn scope_roles_and_targets() -> TestResult {
    let ms = sample()?;
    let req = |role, is_entry| HookRequest {
        model_serving: &ms,
        serving_group: "sample-0",
        role_name: role,
        role_id: "x-0",
        is_entry,
    };
    let scope = |roles: &[&str], target: Option<&str>| PluginScope {
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        target: target.map(str::to_owned),
    };
    assert!(should_run(None, &req("a", false)));
    assert!(should_run(Some(&scope(&[], Some(""))), &req("a", true)));
    assert!(should_run(
        Some(&scope(&["a"], Some("All"))),
        &req("a", false)
    ));
    assert!(!should_run(Some(&scope(&["b"], None)), &req("a", true)));
    assert!(should_run(
        Some(&scope(&[], Some("Entry"))),
        &req("a", true)
    ));
    assert!(!should_run(
        Some(&scope(&[], Some("Entry"))),
        &req("a", false)
    ));
    // An unknown target runs nowhere (Go's matchesTarget).
    assert!(!should_run(
        Some(&scope(&[], Some("entry"))),
        &req("a", true)
    ));
    Ok(())
}

#[test]
fn an_unknown_plugin_creates_no_pod() -> TestResult {
    let mut ms = sample()?;
    ms.spec.plugins = vec![plugin("foo", json!(null), None)];
    let mut list = pods(&ms, 0);
    let err = on_pod_create(&ms, &mut list).err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("plugin foo not registered (built-in plugins: demo-pod-tweaks, lws-standard-labels)")
    );
    assert!(list.is_empty());
    Ok(())
}

#[test]
fn the_webhook_rules_name_the_field_and_the_known_plugins() -> TestResult {
    let mut ms = sample()?;
    let bad_target = PluginScope {
        roles: Vec::new(),
        target: Some("Leader".to_owned()),
    };
    ms.spec.plugins = vec![
        plugin(LWS_LABELS, json!(null), None),
        plugin("foo", json!(null), None),
        plugin(DEMO, json!({"env": "X=1"}), Some(bad_target)),
    ];
    let errors: Vec<String> = validate(Registry::builtin(), &ms)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.plugins[1].name: unknown plugin \"foo\"; built-in plugins: demo-pod-tweaks, lws-standard-labels",
            "spec.plugins[2].config: plugin \"demo-pod-tweaks\" cannot decode its config: invalid type: string \"X=1\", expected a sequence",
            "spec.plugins[2].scope.target: unknown target \"Leader\"; must be one of All, Entry, Worker",
        ]
    );
    ms.spec.plugins = vec![plugin(
        DEMO,
        json!({"runtimeClassName": "x", "other": 1}),
        None,
    )];
    assert!(validate(Registry::builtin(), &ms).is_empty());
    // A config given as an array is refused, not read by position; a name given twice too.
    ms.spec.plugins = vec![
        plugin(DEMO, json!(["nvidia", {"k": "v"}]), None),
        plugin(LWS_LABELS, json!(null), None),
        plugin(DEMO, json!(null), None),
    ];
    let errors: Vec<String> = validate(Registry::builtin(), &ms)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.plugins[0].config: plugin \"demo-pod-tweaks\" cannot decode its config: invalid type: sequence, expected a map",
            "spec.plugins[2].name: duplicate plugin \"demo-pod-tweaks\" (also spec.plugins[0]); a name identifies one plugin",
        ]
    );
    Ok(())
}

#[test]
fn ready_hooks_run_on_running_and_ready_pods_only() -> TestResult {
    let mut ms = sample()?;
    ms.spec.plugins = vec![plugin("foo", json!(null), None)];
    // Without any pod the chain is still built: an unknown plugin is reported.
    assert!(on_pod_ready(&ms, &[]).is_err());
    ms.spec.plugins = vec![plugin(DEMO, json!(null), None)];
    let ready = crate::testutil::observed_pod("sample", "sample-0", "prefill", 0, 0, true, None);
    on_pod_ready(&ms, &[ready])?;
    Ok(())
}
