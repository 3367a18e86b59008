//! What the ModelServing tests share: the controller and a simulated node on the test
//! namespace, Kthena's example ModelServings, and waiting for convergence.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::{ModelServing, Object, load_file};
use kthena_controller::serving::{Config, run};
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::TestNamespace;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use tokio::task::JoinSet;

/// Upper bound for convergence (a timeout, not a measured latency).
pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) struct Env {
    pub(crate) ns: TestNamespace,
    _tasks: JoinSet<()>,
    _node: SimNode,
}

/// A namespace with the controller and a simulated node watching only it.
pub(crate) async fn setup(prefix: &str) -> Result<Env> {
    let ns = kthena_testenv::namespace(prefix).await?;
    let mut tasks = JoinSet::new();
    tasks.spawn(run(
        ns.client().clone(),
        serving_config(&ns),
        std::future::pending(),
    ));
    let node = sim_node(&ns);
    Ok(Env {
        ns,
        _tasks: tasks,
        _node: node,
    })
}

/// The ModelServing controller's settings in the tests: only `ns`, two workers.
pub(crate) fn serving_config(ns: &TestNamespace) -> Config {
    Config {
        namespace: Some(ns.name().to_owned()),
        workers: 2,
        ..Config::default()
    }
}

/// A simulated node running the pods of `ns`, probing engines every 100 ms.
pub(crate) fn sim_node(ns: &TestNamespace) -> SimNode {
    SimNode::start(
        ns.client().clone(),
        NodeConfig {
            namespace: Some(ns.name().to_owned()),
            health_interval: Duration::from_millis(100),
            ..NodeConfig::default()
        },
    )
}

/// Creates Kthena's example `examples/model-serving/<file>` in the test namespace.
pub(crate) async fn create_example(ns: &TestNamespace, file: &str) -> Result<ModelServing> {
    create_example_in(&ns.api(), ns.name(), file).await
}

/// Creates Kthena's example `examples/model-serving/<file>` with `api` in namespace `ns`.
pub(crate) async fn create_example_in(
    api: &Api<ModelServing>,
    ns: &str,
    file: &str,
) -> Result<ModelServing> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    let docs = load_file(&path)?;
    let Some(Object::ModelServing(ms)) = docs.into_iter().next().map(|d| d.object) else {
        bail!("{file} is not a ModelServing");
    };
    let mut ms = *ms;
    ms.metadata.namespace = Some(ns.to_owned());
    Ok(api.create(&PostParams::default(), &ms).await?)
}

/// Polls `check` (every 100 ms) until it returns `Some`, or fails after [`WAIT`].
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn condition(ms: &ModelServing, type_: &str) -> Option<String> {
    let st = ms.status.as_ref()?;
    st.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// Applies an RFC 6902 JSON patch to a ModelServing. Unlike get-then-replace it carries no
/// resourceVersion, so it cannot lose a race with the controller's status writes.
pub(crate) async fn json_patch(
    ns: &TestNamespace,
    name: &str,
    ops: serde_json::Value,
) -> Result<()> {
    let ops: json_patch::Patch = serde_json::from_value(ops)?;
    ns.api::<ModelServing>()
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
        .await?;
    Ok(())
}

/// Waits until `name` is Available=True with `groups` available groups and returns it.
pub(crate) async fn available(ns: &TestNamespace, name: &str, groups: i32) -> Result<ModelServing> {
    available_in(&ns.api(), name, groups).await
}

/// [`available`] with `api` (any namespace, any cluster).
pub(crate) async fn available_in(
    api: &Api<ModelServing>,
    name: &str,
    groups: i32,
) -> Result<ModelServing> {
    eventually(
        &format!("{name} Available with {groups} groups"),
        || async {
            let ms = api.get(name).await?;
            let st = ms.status.clone().unwrap_or_default();
            let ok = condition(&ms, "Available").as_deref() == Some("True")
                && st.replicas == groups
                && st.available_replicas == Some(groups);
            Ok(ok.then_some(ms))
        },
    )
    .await
}

pub(crate) async fn pod_names(ns: &TestNamespace, ms: &str) -> Result<Vec<String>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={ms}"));
    let mut names: Vec<String> = ns
        .api::<Pod>()
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    Ok(names)
}
