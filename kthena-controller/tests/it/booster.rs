//! The `modelbooster` controller on a real API server: Kthena's example ModelBoosters get
//! the children Go generates (field by field, as the API server stores them), deleted
//! children come back, and children are rewritten only when the booster's spec changes.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kthena_api::networking::Protocol;
use kthena_api::{ModelBooster, ModelRoute, ModelServer, ModelServing, Object, load_file};
use kthena_controller::booster::{
    BoosterConfig, CONFIG_MAP_NAME, Images, REVISION_LABEL, load_images, model_route, model_server,
    run_booster, serving_revision,
};
use kthena_testenv::TestNamespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt as _};
use serde_json::{Value, json};

/// Upper bound for things that have no deadline of their own (a timeout, not a latency).
const WAIT: Duration = Duration::from_secs(30);

fn manifests() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kthena-manifests/examples/model-booster")
}

/// The example `file` as a ModelBooster of `ns`.
fn example(file: &str, ns: &str) -> Result<ModelBooster> {
    let docs = load_file(manifests().join(file))?;
    let Some(Object::ModelBooster(b)) = docs.into_iter().next().map(|d| d.object) else {
        bail!("{file} is not a ModelBooster");
    };
    let mut b = *b;
    b.metadata.namespace = Some(ns.to_owned());
    Ok(b)
}

/// A namespace with the ModelBooster controller watching it.
async fn setup(prefix: &str) -> Result<(TestNamespace, tokio::task::JoinSet<()>)> {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("kthena_controller=debug,kube_runtime=debug")
        .try_init();
    let ns = kthena_testenv::namespace(prefix).await?;
    let config = BoosterConfig {
        namespace: Some(ns.name().to_owned()),
        ..BoosterConfig::default()
    };
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(run_booster(
        ns.client().clone(),
        config,
        std::future::pending(),
    ));
    Ok((ns, tasks))
}

/// Polls `get` until it returns `Some` that satisfies `ok`.
async fn until<K, F>(api: &Api<K>, name: &str, ok: F) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(obj) = api.get_opt(name).await?.filter(|o| ok(o)) {
            return Ok(obj);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{name} never matched");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fixture of `file`: the ModelServing spec Go generates, with `${UID}` and
/// `${REVISION}` filled in.
fn expected_serving(file: &str, booster: &ModelBooster) -> Result<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/booster")
        .join(file);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let text = text
        .replace("${UID}", &booster.uid().unwrap_or_default())
        .replace("${REVISION}", &serving_revision(&booster.spec.backend)?);
    let doc: Value = serde_saphyr::from_str(&text)?;
    Ok(doc["spec"].clone())
}

fn labels(booster: &ModelBooster, backend: &str, revision: &str) -> Value {
    json!({
        "workload.serving.volcano.sh/model-name": booster.name_any(),
        "workload.serving.volcano.sh/backend-name": backend,
        "workload.serving.volcano.sh/managed-by": "workload.serving.volcano.sh",
        "workload.serving.volcano.sh/revision": revision,
        "workload.serving.volcano.sh/model-uid": booster.uid().unwrap_or_default(),
    })
}

fn owner(booster: &ModelBooster) -> Value {
    json!([{
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelBooster",
        "name": booster.name_any(),
        "uid": booster.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn revision<K: Resource>(obj: &K) -> String {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .cloned()
        .unwrap_or_default()
}

/// Checks the three stored children of `booster` field by field.
async fn check_children(ns: &TestNamespace, booster: &ModelBooster, file: &str) -> Result<()> {
    let b = booster.name_any();
    let be = &booster.spec.backend.name;
    let child = format!("{b}-{be}");
    let ms = until(&ns.api::<ModelServing>(), &child, |_| true).await?;
    let srv = until(&ns.api::<ModelServer>(), &child, |_| true).await?;
    let route = until(&ns.api::<ModelRoute>(), &b, |_| true).await?;
    let ms_json = serde_json::to_value(&ms)?;
    assert_eq!(
        ms_json["spec"],
        expected_serving(file, booster)?,
        "{file}: ModelServing spec"
    );
    let rev = serving_revision(&booster.spec.backend)?;
    assert_eq!(
        ms_json["metadata"]["labels"],
        labels(booster, be, &rev),
        "{file}"
    );
    assert_eq!(
        ms_json["metadata"]["ownerReferences"],
        owner(booster),
        "{file}"
    );
    // The ModelServer and ModelRoute as the unit tests check them against Go's rules.
    let (mut want_srv, mut want_route) = (model_server(booster)?, model_route(booster)?);
    let (srv_revision, route_revision) = (revision(&want_srv), revision(&want_route));
    // The CRDs' defaults, set by the API server.
    want_route.spec.rules[0].target_models[0].weight = Some(100);
    want_srv.spec.workload_port.protocol = Some(Protocol::Http);
    assert_eq!(srv.spec, want_srv.spec, "{file}: ModelServer spec");
    assert_eq!(route.spec, want_route.spec, "{file}: ModelRoute spec");
    let srv_json = serde_json::to_value(&srv)?;
    assert_eq!(
        srv_json["metadata"]["labels"],
        labels(booster, be, &srv_revision)
    );
    assert_eq!(srv_json["metadata"]["ownerReferences"], owner(booster));
    let route_json = serde_json::to_value(&route)?;
    assert_eq!(
        route_json["metadata"]["labels"],
        labels(booster, "", &route_revision)
    );
    assert_eq!(route_json["metadata"]["ownerReferences"], owner(booster));
    Ok(())
}

#[tokio::test]
async fn example_boosters_generate_the_children_go_generates() -> Result<()> {
    let (ns, _task) = setup("booster-examples").await?;
    let files = [
        "Qwen2.5-0.5B-Instruct.yaml",
        "Qwen2.5-Coder-32B-Instruct.yaml",
        "lmcache-pd-disaggregation.yaml",
        "nixl-pd-disaggregation.yaml",
        "prefill-decode-disaggregation.yaml",
    ];
    for file in files {
        let b = example(file, ns.name())?;
        let b = ns
            .api::<ModelBooster>()
            .create(&PostParams::default(), &b)
            .await?;
        check_children(&ns, &b, file).await?;
    }
    Ok(())
}

/// Creates the 0.5B example and waits for its three children.
async fn demo(ns: &TestNamespace) -> Result<ModelBooster> {
    let b = example("Qwen2.5-0.5B-Instruct.yaml", ns.name())?;
    let b = ns
        .api::<ModelBooster>()
        .create(&PostParams::default(), &b)
        .await?;
    until(&ns.api::<ModelServing>(), "demo-backend1", |_| true).await?;
    until(&ns.api::<ModelServer>(), "demo-backend1", |_| true).await?;
    until(&ns.api::<ModelRoute>(), "demo", |_| true).await?;
    Ok(b)
}

#[tokio::test]
async fn deleted_children_come_back() -> Result<()> {
    let (ns, _task) = setup("booster-recreate").await?;
    let b = demo(&ns).await?;
    let routes = ns.api::<ModelRoute>();
    let old = routes.get("demo").await?;
    routes.delete("demo", &DeleteParams::default()).await?;
    let new = until(&routes, "demo", |r| r.uid() != old.uid()).await?;
    assert_eq!(new.spec, old.spec);
    assert_eq!(new.spec.model_name, b.name_any());
    assert_eq!(new.meta().owner_references.as_ref().map(Vec::len), Some(1));
    let servings = ns.api::<ModelServing>();
    let old = servings.get("demo-backend1").await?;
    servings
        .delete("demo-backend1", &DeleteParams::default())
        .await?;
    let new = until(&servings, "demo-backend1", |s| s.uid() != old.uid()).await?;
    assert_eq!(new.spec, old.spec);
    Ok(())
}

fn resource_versions(ms: &ModelServing, srv: &ModelServer, route: &ModelRoute) -> [String; 3] {
    [
        ms.resource_version(),
        srv.resource_version(),
        route.resource_version(),
    ]
    .map(Option::unwrap_or_default)
}

#[tokio::test]
async fn only_a_spec_change_rewrites_the_children() -> Result<()> {
    let (ns, _task) = setup("booster-revision").await?;
    let b = demo(&ns).await?;
    let (servings, servers, routes) = (
        ns.api::<ModelServing>(),
        ns.api::<ModelServer>(),
        ns.api::<ModelRoute>(),
    );
    let boosters = ns.api::<ModelBooster>();
    let generation = until(&boosters, "demo", |b| {
        b.status
            .as_ref()
            .is_some_and(|s| s.observed_generation.is_some())
    })
    .await?
    .metadata
    .generation;
    // An autoscaler's replicas are kept: the booster's spec did not change.
    let pp = PatchParams::default();
    servings
        .patch(
            "demo-backend1",
            &pp,
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    let before = resource_versions(
        &servings.get("demo-backend1").await?,
        &servers.get("demo-backend1").await?,
        &routes.get("demo").await?,
    );
    // A status-only change: the controller reconciles (it restores observedGeneration) and
    // rewrites nothing.
    boosters
        .patch_status(
            "demo",
            &pp,
            &Patch::Merge(json!({"status": {"observedGeneration": 0}})),
        )
        .await?;
    until(&boosters, "demo", |b| {
        b.status.as_ref().and_then(|s| s.observed_generation) == generation
    })
    .await?;
    let after = resource_versions(
        &servings.get("demo-backend1").await?,
        &servers.get("demo-backend1").await?,
        &routes.get("demo").await?,
    );
    assert_eq!(after, before, "a status change rewrote a child");
    assert_eq!(servings.get("demo-backend1").await?.spec.replicas, Some(3));
    // A spec change of the backend rewrites the ModelServing (and the ModelServer, whose
    // spec does not change, keeps its revision and is not written).
    boosters
        .patch(
            "demo",
            &pp,
            &Patch::Merge(json!({"spec": {"backend": {"replicas": 2}}})),
        )
        .await?;
    let b2 = until(&boosters, "demo", |x| {
        x.metadata.generation > b.metadata.generation
    })
    .await?;
    let rev = serving_revision(&b2.spec.backend)?;
    let ms = until(&servings, "demo-backend1", |s| revision(s) == rev).await?;
    assert_eq!(ms.spec.replicas, Some(2));
    assert_ne!(rev, serving_revision(&b.spec.backend)?);
    assert_eq!(
        routes
            .get("demo")
            .await?
            .resource_version()
            .unwrap_or_default(),
        before[2]
    );
    // A new request model name re-creates the route (spec.modelName is immutable in Go).
    let old = routes.get("demo").await?;
    boosters
        .patch(
            "demo",
            &pp,
            &Patch::Merge(json!({"spec": {"name": "demo-2"}})),
        )
        .await?;
    let new = until(&routes, "demo", |r| r.spec.model_name == "demo-2").await?;
    assert_ne!(new.uid(), old.uid());
    Ok(())
}

fn conditions(b: &ModelBooster) -> Vec<(String, String, String, String)> {
    let conds = b
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    conds
        .into_iter()
        .map(|c| (c.type_, c.status, c.reason, c.message))
        .collect()
}

fn cond(t: &str, s: &str, r: &str, m: &str) -> (String, String, String, String) {
    (t.to_owned(), s.to_owned(), r.to_owned(), m.to_owned())
}

#[tokio::test]
async fn conditions_follow_the_generated_serving() -> Result<()> {
    let (ns, _task) = setup("booster-conditions").await?;
    demo(&ns).await?;
    let boosters = ns.api::<ModelBooster>();
    let processing = [
        cond(
            "Initialized",
            "True",
            "ModelCreating",
            "ModelBooster initialized",
        ),
        cond(
            "Active",
            "False",
            "ModelProcessing",
            "ModelBooster not ready yet",
        ),
    ];
    until(&boosters, "demo", |b| conditions(b) == processing).await?;
    // The ModelServing controller reports the ServingGroups available.
    let available = json!({"status": {"replicas": 1, "conditions": [{
        "type": "Available", "status": "True", "reason": "AllGroupsReady",
        "message": "All Serving groups are ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    let servings = ns.api::<ModelServing>();
    servings
        .patch_status(
            "demo-backend1",
            &PatchParams::default(),
            &Patch::Merge(available),
        )
        .await?;
    let active = [
        cond(
            "Initialized",
            "True",
            "ModelCreating",
            "ModelBooster initialized",
        ),
        cond("Active", "True", "ModelAvailable", "ModelBooster is ready"),
    ];
    until(&boosters, "demo", |b| conditions(b) == active).await?;
    // A backend the templates cannot build: Failed with Go's message.
    let mut bad = example("Qwen2.5-0.5B-Instruct.yaml", ns.name())?;
    bad.metadata.name = Some("bad".to_owned());
    bad.spec.backend.workers[0].type_ = Some(kthena_api::workload::ModelWorkerType::Decode);
    boosters.create(&PostParams::default(), &bad).await?;
    let failed = [
        cond(
            "Initialized",
            "True",
            "ModelCreating",
            "ModelBooster initialized",
        ),
        cond(
            "Active",
            "False",
            "ModelProcessing",
            "ModelBooster not ready yet",
        ),
        cond(
            "Failed",
            "True",
            "ModelAbnormal",
            "server worker not found in backend: backend1",
        ),
    ];
    until(&boosters, "bad", |b| conditions(b) == failed).await?;
    assert!(servings.get_opt("bad-backend1").await?.is_none());
    Ok(())
}

/// Regression: renaming the backend left the old ModelServer behind, and it still selected
/// the booster's pods (by UID) next to the new one; it is deleted with the old ModelServing.
#[tokio::test]
async fn a_renamed_backend_leaves_no_old_children() -> Result<()> {
    let (ns, _task) = setup("booster-rename").await?;
    demo(&ns).await?;
    let servers = ns.api::<ModelServer>();
    until(&servers, "demo-backend1", |_| true).await?;
    let rename = json!({"spec": {"backend": {"name": "renamed"}}});
    ns.api::<ModelBooster>()
        .patch("demo", &PatchParams::default(), &Patch::Merge(&rename))
        .await?;
    until(&servers, "demo-renamed", |_| true).await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    while servers.get_opt("demo-backend1").await?.is_some()
        || ns
            .api::<ModelServing>()
            .get_opt("demo-backend1")
            .await?
            .is_some()
    {
        if tokio::time::Instant::now() > deadline {
            bail!("the old backend's children are still there");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The images of the entry pods of `ms`'s first role: `(init containers, containers)`.
fn entry_images(ms: &ModelServing) -> Result<(Vec<String>, Vec<String>)> {
    let v = serde_json::to_value(&ms.spec.template.roles[0].entry_template)?;
    let images = |list: &str| {
        v["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["image"].as_str().map(str::to_owned))
            .collect()
    };
    Ok((images("initContainers"), images("containers")))
}

#[tokio::test]
async fn the_config_map_sets_the_downloader_and_runtime_images() -> Result<()> {
    let ns = kthena_testenv::namespace("booster-images").await?;
    let client = ns.client();
    // No ConfigMap: Go's defaults.
    let images = load_images(client, ns.name()).await;
    assert_eq!(images, Images::default());
    assert_eq!(
        (images.downloader.as_str(), images.runtime.as_str()),
        ("kthena/downloader:latest", "kthena/runtime:latest")
    );
    // The chart's ConfigMap with an empty runtime image: that one stays the default.
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": CONFIG_MAP_NAME, "namespace": ns.name()},
        "data": {"model_serving_downloader_image": "registry.local/downloader:v9",
                 "model_serving_runtime_image": ""},
    }))?;
    let cms = ns.api::<ConfigMap>();
    cms.create(&PostParams::default(), &cm).await?;
    let images = load_images(client, ns.name()).await;
    assert_eq!(
        (images.downloader.as_str(), images.runtime.as_str()),
        ("registry.local/downloader:v9", "kthena/runtime:latest")
    );
    let runtime = json!({"data": {"model_serving_runtime_image": "registry.local/runtime:v9"}});
    cms.patch(
        CONFIG_MAP_NAME,
        &PatchParams::default(),
        &Patch::Merge(&runtime),
    )
    .await?;
    let images = load_images(client, ns.name()).await;
    assert_eq!(images.runtime, "registry.local/runtime:v9");
    // The controller started with them writes them into the generated ModelServing.
    let config = BoosterConfig {
        namespace: Some(ns.name().to_owned()),
        images,
        ..BoosterConfig::default()
    };
    let mut task = tokio::task::JoinSet::new();
    task.spawn(run_booster(client.clone(), config, std::future::pending()));
    demo(&ns).await?;
    let ms = ns.api::<ModelServing>().get("demo-backend1").await?;
    let (init, containers) = entry_images(&ms)?;
    assert_eq!(init, ["registry.local/downloader:v9"]);
    assert!(
        containers.iter().any(|i| i == "registry.local/runtime:v9"),
        "{containers:?}"
    );
    assert!(
        !containers.iter().any(|i| i.starts_with("kthena/")),
        "{containers:?}"
    );
    Ok(())
}
