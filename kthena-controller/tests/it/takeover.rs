//! Taking over from Go Kthena without restarting a model: a ModelServing whose
//! ControllerRevision, pods and headless Services were made as Go Kthena v1.0.0's
//! controller makes them (`pkg/model-serving-controller/utils/utils.go`,
//! `utils/controller_revision.go`, `controller/model_serving_controller.go`), with the
//! revision labels Go's own code computed, all Running and Ready on the simulated node. Our
//! controller then starts: no pod or Service is deleted or recreated and the status
//! converges to Available at Go's revision. Changing the template afterwards rolls the
//! groups (so the test can fail).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures_util::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, Service};
use kthena_api::{ModelServing, Object, load_str};
use kthena_controller::serving::{Config, run};
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::TestNamespace;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::ms_support::{eventually, json_patch};

/// The object (two groups of a prefill role with one worker and a decode role).
const OBJECT: &str = include_str!("../../src/serving/revision/testdata/takeover.yaml");
/// Printed by Go Kthena v1.0.0 `utils.ModelServingRevision` for [`OBJECT`].
const GO_REVISION: &str = "59fd9d9fb8";
/// Printed by Go Kthena v1.0.0 `utils.CalRoleTemplateHash` for the roles of [`OBJECT`].
const GO_ROLE_HASHES: [(&str, &str); 2] = [("prefill", "56f4b456c7"), ("decode", "85f9f7c947")];
/// Printed by Go: `json.Marshal(map[string]interface{}{"data": roles})`, the data of the
/// ControllerRevision Go Kthena creates for [`OBJECT`].
const GO_CR_DATA: &str = include_str!("../../src/serving/revision/testdata/takeover.cr.json");
/// Quiet time after convergence in which no pod may be deleted or created.
const SETTLE: Duration = Duration::from_secs(3);

/// Go's owner reference to the ModelServing (`newModelServingOwnerRef`).
fn owner(ms: &ModelServing) -> Value {
    json!([{"apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelServing",
        "name": ms.name_any(), "uid": ms.uid(), "blockOwnerDeletion": true, "controller": true}])
}

/// One pod as Go's `GenerateEntryPod` / `GenerateWorkerPod` make it: base labels, `entry`
/// on the entry pod, the template's labels, its spec with the ModelServing's scheduler, and
/// `GROUP_SIZE`, `ENTRY_ADDRESS`, `WORKER_INDEX` appended to every container's env.
fn go_pod(
    ms: &ModelServing,
    group: usize,
    role: &kthena_api::workload::Role,
    index: i32,
) -> Result<Pod> {
    let name = ms.name_any();
    let ns = ms.namespace().unwrap_or_default();
    let group_name = format!("{name}-{group}");
    let role_id = format!("{}-0", role.name);
    let hash = GO_ROLE_HASHES
        .iter()
        .find(|(r, _)| *r == role.name)
        .context("role hash")?
        .1;
    let template = if index == 0 {
        Some(&role.entry_template)
    } else {
        role.worker_template.as_ref()
    };
    let template = template.context("worker template")?;
    let mut labels = BTreeMap::from([
        ("modelserving.volcano.sh/name".to_owned(), name),
        (
            "modelserving.volcano.sh/group-name".to_owned(),
            group_name.clone(),
        ),
        ("modelserving.volcano.sh/role".to_owned(), role.name.clone()),
        (
            "modelserving.volcano.sh/role-id".to_owned(),
            role_id.clone(),
        ),
        (
            "modelserving.volcano.sh/revision".to_owned(),
            GO_REVISION.to_owned(),
        ),
        (
            "modelserving.volcano.sh/role-template-hash".to_owned(),
            hash.to_owned(),
        ),
    ]);
    if index == 0 {
        labels.insert(
            "modelserving.volcano.sh/entry".to_owned(),
            "true".to_owned(),
        );
    }
    let meta = template.metadata.clone().unwrap_or_default();
    labels.extend(meta.labels.unwrap_or_default());
    let mut spec = serde_json::to_value(template.spec.clone().unwrap_or_default())?;
    spec["schedulerName"] = json!(ms.spec.scheduler_name);
    let entry = format!("{group_name}-{role_id}-0");
    let env = json!([
        {"name": "GROUP_SIZE", "value": (role.worker_replicas + 1).to_string()},
        {"name": "ENTRY_ADDRESS", "value": format!("{entry}.{ns}")},
        {"name": "WORKER_INDEX", "value": index.to_string()},
    ]);
    for c in spec["containers"].as_array_mut().context("containers")? {
        c["env"] = env.clone();
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("{group_name}-{role_id}-{index}"), "namespace": ns,
            "labels": labels, "annotations": meta.annotations, "ownerReferences": owner(ms)},
        "spec": spec,
    }))?)
}

/// Go's headless Service of a role replica with workers (`CreateHeadlessService`).
fn go_service(ms: &ModelServing, group: usize, role: &str) -> Result<Service> {
    let group_name = format!("{}-{group}", ms.name_any());
    let role_id = format!("{role}-0");
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("{group_name}-{role_id}-0"), "namespace": ms.namespace(),
            "ownerReferences": owner(ms),
            "labels": {"modelserving.volcano.sh/name": ms.name_any(),
                "modelserving.volcano.sh/group-name": group_name,
                "modelserving.volcano.sh/role": role, "modelserving.volcano.sh/role-id": role_id}},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
            "selector": {"modelserving.volcano.sh/group-name": group_name,
                "modelserving.volcano.sh/role": role, "modelserving.volcano.sh/role-id": role_id,
                "modelserving.volcano.sh/entry": "true"}},
    }))?)
}

/// Go's ControllerRevision `<ms>-<revision>` (`CreateControllerRevision`).
fn go_controller_revision(ms: &ModelServing) -> Result<ControllerRevision> {
    let data: Value = serde_json::from_str(GO_CR_DATA)?;
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("{}-{GO_REVISION}", ms.name_any()),
            "namespace": ms.namespace(), "ownerReferences": owner(ms),
            "labels": {"modelserving.volcano.sh/name": ms.name_any(),
                "modelserving.volcano.sh/revision": GO_REVISION}},
        "revision": 1,
        "data": data,
    }))?)
}

/// Creates the ModelServing and everything Go Kthena's controller would have made for it.
async fn as_go_made_it(ns: &TestNamespace) -> Result<ModelServing> {
    let docs = load_str("takeover.yaml", OBJECT)?;
    let Some(Object::ModelServing(ms)) = docs.into_iter().next().map(|d| d.object) else {
        bail!("takeover.yaml is not a ModelServing");
    };
    let mut ms = *ms;
    ms.metadata.namespace = Some(ns.name().to_owned());
    let pp = PostParams::default();
    let ms = ns.api::<ModelServing>().create(&pp, &ms).await?;
    ns.api::<ControllerRevision>()
        .create(&pp, &go_controller_revision(&ms)?)
        .await?;
    for group in 0..2 {
        for role in &ms.spec.template.roles {
            for index in 0..=role.worker_replicas {
                ns.api::<Pod>()
                    .create(&pp, &go_pod(&ms, group, role, index)?)
                    .await?;
            }
            if role.worker_template.is_some() {
                ns.api::<Service>()
                    .create(&pp, &go_service(&ms, group, &role.name)?)
                    .await?;
            }
        }
    }
    Ok(ms)
}

/// Names and UIDs of the namespace's objects of kind `K`, sorted.
async fn uids<K>(api: &Api<K>) -> Result<Vec<(String, String)>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut v: Vec<(String, String)> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|o| (o.name_any(), o.uid().unwrap_or_default()))
        .collect();
    v.sort();
    Ok(v)
}

fn ready(pod: &Pod) -> bool {
    let st = pod.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What a pod watch saw: `(event, pod name)` for additions, deletions and pods marked for
/// deletion.
type Seen = Arc<Mutex<Vec<(&'static str, String)>>>;

/// Watches the namespace's pods from `resource_version` into `seen`.
async fn watch_pods(api: Api<Pod>, resource_version: String, seen: Seen) -> Result<()> {
    let wp = WatchParams::default().timeout(290);
    let mut stream = api.watch(&wp, &resource_version).await?.boxed();
    while let Some(event) = stream.try_next().await? {
        let entry = match event {
            WatchEvent::Added(p) => ("ADDED", p.name_any()),
            WatchEvent::Deleted(p) => ("DELETED", p.name_any()),
            WatchEvent::Modified(p) if p.metadata.deletion_timestamp.is_some() => {
                ("DELETING", p.name_any())
            }
            _ => continue,
        };
        seen.lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .push(entry);
    }
    Ok(())
}

/// Waits until the ModelServing is Available with both groups at `revision`.
async fn converged(ns: &TestNamespace, revision: &str) -> Result<ModelServing> {
    eventually(&format!("takeover Available at {revision}"), || async {
        let ms = ns.api::<ModelServing>().get("takeover").await?;
        let st = ms.status.clone().unwrap_or_default();
        let ok = crate::ms_support::condition(&ms, "Available").as_deref() == Some("True")
            && st.replicas == 2
            && st.available_replicas == Some(2)
            && st.updated_replicas == Some(2)
            && st.current_revision.as_deref() == Some(revision)
            && st.update_revision.as_deref() == Some(revision);
        Ok(ok.then_some(ms))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takes_over_go_made_groups_without_restarting_a_pod() -> Result<()> {
    let ns = kthena_testenv::namespace("takeover").await?;
    let node_config = NodeConfig {
        namespace: Some(ns.name().to_owned()),
        health_interval: Duration::from_millis(100),
        ..NodeConfig::default()
    };
    let _node = SimNode::start(ns.client().clone(), node_config);
    as_go_made_it(&ns).await?;
    let pods = ns.api::<Pod>();
    let list = eventually("Go's 6 pods Running and Ready", || async {
        let list = pods.list(&ListParams::default()).await?;
        Ok((list.items.len() == 6 && list.items.iter().all(ready)).then_some(list))
    })
    .await?;
    let before_pods = uids(&pods).await?;
    let before_svcs = uids(&ns.api::<Service>()).await?;
    let cr_name = format!("takeover-{GO_REVISION}");
    let cr_version = ns
        .api::<ControllerRevision>()
        .get(&cr_name)
        .await?
        .resource_version();

    let seen: Seen = Arc::default();
    let mut tasks = JoinSet::new();
    let rv = list.metadata.resource_version.clone().unwrap_or_default();
    tasks.spawn(watch_pods(pods.clone(), rv, seen.clone()));
    let config = Config {
        namespace: Some(ns.name().to_owned()),
        workers: 2,
        ..Config::default()
    };
    let client = ns.client().clone();
    tasks.spawn(async move {
        run(client, config, std::future::pending()).await;
        Ok(())
    });

    converged(&ns, GO_REVISION).await?;
    // A metadata change makes the controller reconcile once more; nothing may move then
    // either.
    json_patch(
        &ns,
        "takeover",
        json!([{"op": "add", "path": "/metadata/annotations",
        "value": {"example.com/touched": "1"}}]),
    )
    .await?;
    tokio::time::sleep(SETTLE).await;
    let events = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    assert_eq!(
        events,
        Vec::<(&str, String)>::new(),
        "pods moved during the takeover"
    );
    assert_eq!(uids(&pods).await?, before_pods, "pods were recreated");
    assert_eq!(
        uids(&ns.api::<Service>()).await?,
        before_svcs,
        "Services were recreated"
    );
    let cr = ns.api::<ControllerRevision>().get(&cr_name).await?;
    assert_eq!(
        cr.resource_version(),
        cr_version,
        "Go's ControllerRevision was rewritten"
    );
    converged(&ns, GO_REVISION).await?;

    // Negative control: a template change is a new revision and rolls both groups.
    json_patch(
        &ns,
        "takeover",
        json!([{"op": "replace",
        "path": "/spec/template/roles/1/entryTemplate/spec/containers/0/args/1",
        "value": "8002"}]),
    )
    .await?;
    let new_revision = eventually("a new update revision", || async {
        let ms = ns.api::<ModelServing>().get("takeover").await?;
        let rev = ms.status.as_ref().and_then(|s| s.update_revision.clone());
        Ok(rev.filter(|r| r != GO_REVISION))
    })
    .await?;
    converged(&ns, &new_revision).await?;
    let events = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    for group in 0..2 {
        let old = format!("takeover-{group}-decode-0-0");
        assert!(
            events.contains(&("DELETED", old.clone())),
            "{old} not rolled: {events:?}"
        );
    }
    tasks.abort_all();
    Ok(())
}
