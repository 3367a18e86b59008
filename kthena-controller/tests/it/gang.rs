//! Gang scheduling on a real API server: with Volcano's PodGroup CRD (installed by
//! kthena-testenv) each ServingGroup of Kthena's `gangPolicy.yaml` gets its PodGroup before
//! its pods, scale-down deletes it; without the CRD none is made and the ModelServing still
//! reconciles.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kthena_api::thirdparty::PodGroup;
use kthena_api::{ModelServing, Object, load_file};
use kthena_controller::serving::{Config, run};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio::task::JoinSet;

use crate::ms_support::eventually;

fn example(file: &str, ns: &str) -> Result<ModelServing> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    let Some(Object::ModelServing(ms)) = load_file(&path)?.into_iter().next().map(|d| d.object)
    else {
        bail!("{file} is not a ModelServing");
    };
    let mut ms = *ms;
    ms.metadata.namespace = Some(ns.to_owned());
    Ok(ms)
}

fn controller(client: &Client, ns: &str) -> JoinSet<()> {
    let config = Config {
        namespace: Some(ns.to_owned()),
        workers: 2,
        ..Config::default()
    };
    let mut tasks = JoinSet::new();
    tasks.spawn(run(client.clone(), config, std::future::pending()));
    tasks
}

async fn pods_of(api: &Api<Pod>, group: &str) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/group-name={group}"));
    Ok(api.list(&lp).await?.items)
}

fn rv(meta: &ObjectMeta) -> Result<u64> {
    let rv = meta
        .resource_version
        .as_deref()
        .context("no resourceVersion")?;
    Ok(rv.parse()?)
}

/// Waits for the 8 pods of `group` and checks that its PodGroup was written before any of
/// them (etcd resourceVersions of one cluster increase with every write; nothing else
/// writes these objects here: there is no scheduler or node) and that each pod names its
/// PodGroup and task.
async fn group_pods_after_podgroup(
    pods: &Api<Pod>,
    pgs: &Api<PodGroup>,
    group: &str,
) -> Result<PodGroup> {
    let list = eventually(&format!("8 pods of {group}"), || async {
        let list = pods_of(pods, group).await?;
        Ok((list.len() == 8).then_some(list))
    })
    .await?;
    let pg = pgs.get(group).await?;
    for pod in &list {
        assert!(
            rv(&pod.metadata)? > rv(&pg.metadata)?,
            "{} before its PodGroup",
            pod.name_any()
        );
        assert_eq!(pod.annotations()["scheduling.k8s.io/group-name"], group);
        let role_id = &pod.labels()["modelserving.volcano.sh/role-id"];
        assert_eq!(&pod.annotations()["volcano.sh/task-spec"], role_id);
        let spec = pod.spec.clone().unwrap_or_default();
        assert_eq!(spec.scheduler_name.as_deref(), Some("volcano"));
    }
    Ok(pg)
}

#[tokio::test]
async fn gang_policy_podgroups_before_pods_and_deleted_on_scale_down() -> Result<()> {
    let ns = kthena_testenv::namespace("gang").await?;
    let _controller = controller(ns.client(), ns.name());
    let ms = ns
        .api::<ModelServing>()
        .create(
            &PostParams::default(),
            &example("gangPolicy.yaml", ns.name())?,
        )
        .await?;
    let (pods, pgs) = (ns.api::<Pod>(), ns.api::<PodGroup>());
    let pg = group_pods_after_podgroup(&pods, &pgs, "sample-0").await?;
    assert_eq!(pg.spec.min_member, Some(6));
    assert_eq!(
        pg.spec.min_resources.clone().unwrap_or_default()["cpu"],
        Quantity("600m".to_owned())
    );
    let subs: Vec<_> = pg
        .spec
        .sub_group_policy
        .iter()
        .map(|s| (s.name.as_str(), s.sub_group_size, s.min_sub_groups))
        .collect();
    assert_eq!(
        subs,
        [("prefill", Some(2), Some(2)), ("decode", Some(2), Some(1))]
    );
    assert_eq!(
        pg.spec.sub_group_policy[0].match_label_keys,
        ["modelserving.volcano.sh/role-id"]
    );
    assert_eq!(
        pg.labels()["modelserving.volcano.sh/group-name"],
        "sample-0"
    );
    assert_eq!(pg.labels()["modelserving.volcano.sh/name"], "sample");
    let owner = &pg.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("ModelServing", ms.uid().unwrap_or_default().as_str())
    );
    assert_eq!(owner.controller, Some(true));

    let scale = |n: i32| {
        let api = ns.api::<ModelServing>();
        async move {
            let patch = Patch::Merge(json!({"spec": {"replicas": n}}));
            api.patch("sample", &PatchParams::default(), &patch).await
        }
    };
    scale(2).await?;
    group_pods_after_podgroup(&pods, &pgs, "sample-1").await?;
    scale(1).await?;
    eventually("PodGroup sample-1 deleted", || async {
        let names: Vec<String> = pgs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        Ok((names == ["sample-0"]).then_some(()))
    })
    .await?;
    eventually("pods of sample-1 deleted", || async {
        Ok(pods_of(&pods, "sample-1").await?.is_empty().then_some(()))
    })
    .await?;

    // A PodGroup deleted by hand comes back (PodGroups are watched).
    let uid = pgs.get("sample-0").await?.uid();
    pgs.delete("sample-0", &DeleteParams::default()).await?;
    eventually("PodGroup sample-0 recreated", || async {
        let pg = pgs.get_opt("sample-0").await?;
        Ok(pg.filter(|p| p.uid() != uid).map(|_| ()))
    })
    .await?;
    // The queue annotation updates the PodGroup in place.
    let patch = Patch::Merge(
        json!({"metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "q1"}}}),
    );
    ns.api::<ModelServing>()
        .patch("sample", &PatchParams::default(), &patch)
        .await?;
    eventually("PodGroup sample-0 in queue q1", || async {
        let pg = pgs.get_opt("sample-0").await?;
        Ok(pg
            .filter(|p| p.spec.queue.as_deref() == Some("q1"))
            .map(|_| ()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn without_the_crd_no_podgroups_and_the_modelserving_reconciles() -> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    let client = plane.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("podgroups.scheduling.volcano.sh", &DeleteParams::default())
        .await?;
    eventually("the PodGroup API gone from discovery", || async {
        let gone = client
            .list_api_group_resources("scheduling.volcano.sh/v1beta1")
            .await
            .is_err();
        Ok(gone.then_some(()))
    })
    .await?;
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("nocrd".to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let _controller = controller(&client, "nocrd");
    let api: Api<ModelServing> = Api::namespaced(client.clone(), "nocrd");
    api.create(
        &PostParams::default(),
        &example("gangPolicy.yaml", "nocrd")?,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "nocrd");
    let list = eventually("8 pods without PodGroups", || async {
        let list = pods_of(&pods, "sample-0").await?;
        Ok((list.len() == 8).then_some(list))
    })
    .await?;
    for pod in &list {
        assert!(
            !pod.annotations()
                .contains_key("scheduling.k8s.io/group-name")
        );
        assert!(!pod.annotations().contains_key("volcano.sh/task-spec"));
    }
    eventually("status written", || async {
        let ms = api.get("sample").await?;
        let st = ms.status.unwrap_or_default();
        Ok((st.replicas == 1 && st.observed_generation == ms.metadata.generation).then_some(()))
    })
    .await?;
    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), "nocrd");
    assert!(
        pgs.list(&ListParams::default()).await.is_err(),
        "PodGroups are served"
    );
    older_volcano_gets_no_sub_groups(&client).await
}

/// A PodGroup CRD without `spec.subGroupPolicy` (older Volcano): PodGroups without it.
async fn older_volcano_gets_no_sub_groups(client: &Client) -> Result<()> {
    let mut crd = kthena_api::thirdparty::thirdparty_crds().remove(0);
    let props = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut()?.get_mut("spec"))
        .and_then(|s| s.properties.as_mut())
        .context("no spec schema")?;
    props
        .remove("subGroupPolicy")
        .context("no subGroupPolicy")?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually("the old PodGroup CRD created", || async {
        let res = crds.create(&PostParams::default(), &crd).await;
        Ok(res.is_ok().then_some(()))
    })
    .await?;
    eventually("the PodGroup API served", || async {
        let served = client
            .list_api_group_resources("scheduling.volcano.sh/v1beta1")
            .await
            .is_ok();
        Ok(served.then_some(()))
    })
    .await?;
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("oldvolcano".to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let _controller = controller(client, "oldvolcano");
    let api: Api<ModelServing> = Api::namespaced(client.clone(), "oldvolcano");
    api.create(
        &PostParams::default(),
        &example("gangPolicy.yaml", "oldvolcano")?,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "oldvolcano");
    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), "oldvolcano");
    let pg = group_pods_after_podgroup(&pods, &pgs, "sample-0").await?;
    assert_eq!(pg.spec.min_member, Some(6));
    assert!(pg.spec.sub_group_policy.is_empty());
    Ok(())
}
