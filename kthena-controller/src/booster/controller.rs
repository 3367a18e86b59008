//! The `modelbooster` controller's kube-runtime side: watch ModelBoosters and the children
//! labelled `managed-by`, decide with [`super::reconcile`], write with server-side apply.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kthena_api::{ModelBooster, ModelRoute, ModelServer, ModelServing};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::reconcile::{Children, Existing, Outcome, desired, serving_available, status, writes};
use super::{Images, MANAGED_BY, MANAGED_BY_LABEL, MODEL_UID_LABEL};
use crate::error::{Error, Result, kube_err};

/// Periodic resync of a booster with nothing to wait for.
const RESYNC: Duration = Duration::from_secs(300);
/// Retry after a failed reconcile.
const RETRY: Duration = Duration::from_secs(5);
/// Bound of one reconcile's reads and writes (a stuck call would hold the booster's next
/// reconcile forever).
const CALLS_TIMEOUT: Duration = Duration::from_secs(10);

/// What [`run_booster`] watches and writes.
#[derive(Debug, Clone)]
pub struct BoosterConfig {
    /// Watch only this namespace (all when `None`).
    pub namespace: Option<String>,
    /// ModelBoosters reconciled concurrently (Go `--workers`, default 5).
    pub workers: u16,
    /// Field manager of the server-side applies and status writes.
    pub field_manager: String,
    /// Images of the downloader and runtime containers.
    pub images: Images,
}

impl Default for BoosterConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            workers: 5,
            field_manager: "kthena-controller".to_owned(),
            images: Images::default(),
        }
    }
}

struct Ctx {
    client: Client,
    config: BoosterConfig,
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the ModelBooster controller until `shutdown` completes: each ModelBooster gets its
/// ModelServing, ModelServer and ModelRoute (re-created when deleted, rewritten when the
/// booster's spec changes their revision) and its `Initialized`/`Active`/`Failed`
/// conditions. Errors are logged, written as `Failed` and retried after 5 s.
pub async fn run_booster(
    client: Client,
    config: BoosterConfig,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = config.namespace.clone();
    let ns = ns.as_deref();
    let children = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let workers = config.workers;
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
    });
    Controller::new(api::<ModelBooster>(&client, ns), watcher::Config::default())
        .owns(api::<ModelServing>(&client, ns), children.clone())
        .owns(api::<ModelServer>(&client, ns), children.clone())
        .owns(api::<ModelRoute>(&client, ns), children)
        .with_config(controller::Config::default().concurrency(workers))
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile,
            |_, err, _| {
                tracing::warn!(error = %err, "modelbooster reconcile failed; retrying in 5s");
                Action::requeue(RETRY)
            },
            ctx,
        )
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(modelbooster = %obj, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "modelbooster reconcile error"),
            }
        })
        .await;
}

async fn reconcile(booster: Arc<ModelBooster>, ctx: Arc<Ctx>) -> Result<Action> {
    if booster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let outcome = match tokio::time::timeout(CALLS_TIMEOUT, sync_children(&booster, &ctx)).await {
        Ok(Ok(available)) => Ok(Outcome::Written(available)),
        Ok(Err(e)) => Err(e),
        // Not the booster's fault: retried without a `Failed` condition.
        Err(_) => return Err(Error::Timeout(CALLS_TIMEOUT)),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let written = match &outcome {
        Ok(o) => o.clone(),
        Err(e) => Outcome::Failed(e.to_string()),
    };
    let st = status(&booster, &written, &now);
    if booster.status.as_ref() != Some(&st) {
        let ns = booster.namespace().unwrap_or_default();
        let name = booster.name_any();
        let boosters: Api<ModelBooster> = Api::namespaced(ctx.client.clone(), &ns);
        let pp = PatchParams {
            field_manager: Some(ctx.config.field_manager.clone()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(json!({ "status": st }));
        tokio::time::timeout(CALLS_TIMEOUT, boosters.patch_status(&name, &pp, &patch))
            .await
            .map_err(|_| Error::Timeout(CALLS_TIMEOUT))?
            .map_err(kube_err(format!(
                "updating status of modelbooster {ns}/{name}"
            )))?;
    }
    outcome.map(|_| Action::requeue(RESYNC))
}

/// Reads the children, writes what [`writes`] says; `Some(available)` of the booster's one
/// ModelServing.
async fn sync_children(booster: &ModelBooster, ctx: &Ctx) -> Result<Option<bool>> {
    let want = desired(booster, &ctx.config.images)?;
    let ns = booster.namespace().unwrap_or_default();
    let existing = existing(&ctx.client, &ns, booster, &want).await?;
    let w = writes(&want, &existing);
    let ss = PatchParams::apply(&ctx.config.field_manager).force();
    let servings: Api<ModelServing> = Api::namespaced(ctx.client.clone(), &ns);
    let serving_name = want.serving.name_any();
    let mut serving = existing
        .servings
        .iter()
        .find(|s| s.name_any() == serving_name)
        .cloned();
    if w.serving {
        tracing::info!(modelserving = %serving_name, "writing generated ModelServing");
        let applied = servings
            .patch(&serving_name, &ss, &Patch::Apply(&want.serving))
            .await
            .map_err(kube_err(format!(
                "applying modelserving {ns}/{serving_name}"
            )))?;
        serving = Some(applied);
    }
    for stale in &w.delete_servings {
        tracing::info!(modelserving = %stale, "deleting stale ModelServing");
        delete(&servings, stale).await?;
    }
    let api: Api<ModelServer> = Api::namespaced(ctx.client.clone(), &ns);
    if w.server {
        let name = want.server.name_any();
        api.patch(&name, &ss, &Patch::Apply(&want.server))
            .await
            .map_err(kube_err(format!("applying modelserver {ns}/{name}")))?;
    }
    for stale in &w.delete_servers {
        tracing::info!(modelserver = %stale, "deleting stale ModelServer");
        delete(&api, stale).await?;
    }
    let routes: Api<ModelRoute> = Api::namespaced(ctx.client.clone(), &ns);
    let route = want.route.name_any();
    if w.recreate_route {
        tracing::info!(modelroute = %route, "re-creating ModelRoute: spec.modelName is immutable");
        delete(&routes, &route).await?;
    }
    if w.route {
        routes
            .patch(&route, &ss, &Patch::Apply(&want.route))
            .await
            .map_err(kube_err(format!("applying modelroute {ns}/{route}")))?;
    }
    Ok(serving.as_ref().map(serving_available))
}

async fn existing(
    client: &Client,
    ns: &str,
    booster: &ModelBooster,
    want: &Children,
) -> Result<Existing> {
    let uid = booster.uid().unwrap_or_default();
    let servings: Api<ModelServing> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{MODEL_UID_LABEL}={uid}"));
    let list = servings.list(&lp).await.map_err(kube_err(format!(
        "listing modelservings of modelbooster {ns}/{}",
        booster.name_any()
    )))?;
    let servers: Api<ModelServer> = Api::namespaced(client.clone(), ns);
    let routes: Api<ModelRoute> = Api::namespaced(client.clone(), ns);
    let (server, route) = (want.server.name_any(), want.route.name_any());
    let mut owned = servers
        .list(&lp)
        .await
        .map_err(kube_err(format!(
            "listing modelservers of modelbooster {ns}/{}",
            booster.name_any()
        )))?
        .items;
    let at = owned.iter().position(|s| s.name_any() == server);
    let server = at.map(|i| owned.swap_remove(i));
    Ok(Existing {
        servings: list.items,
        server,
        other_servers: owned.iter().map(kube::ResourceExt::name_any).collect(),
        route: routes
            .get_opt(&route)
            .await
            .map_err(kube_err(format!("reading modelroute {ns}/{route}")))?,
    })
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube {
            action: format!("deleting {name}"),
            source: e,
        }),
    }
}
