//! LeaderWorkerSet support (Go `pkg/model-serving-controller/controller/lws_controller.go`):
//! when the API server serves `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet at start, every
//! LeaderWorkerSet (no label or annotation needed, all namespaces or the controller's one)
//! is served by a ModelServing of the same name ([`model_serving`]) that it owns, kept in
//! sync with it, and its status gets the ModelServing's group counts ([`status_patch`]).
//! Deleting the LeaderWorkerSet deletes the ModelServing through the garbage collector (the
//! owner reference), as in Go. No LeaderWorkerSet controller is needed, nor wanted: both
//! would make pods for it. A ModelServing the API server refuses to create gives the
//! LeaderWorkerSet a Warning event `FailedCreate` (once per message and generation; Go only
//! logs it).

mod convert;
mod types;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use kthena_api::ModelServing;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource as _, ResourceExt as _};

use crate::error::{Error, Result, kube_err};
use crate::serving::memo::{Memo, Warnings};

pub use convert::{ROLE, controlled_by, model_serving, owner_ref, spec_differs, status_patch};
pub use types::{
    API_VERSION, GROUP, KIND, LeaderWorkerSet, LeaderWorkerSetSpec, LeaderWorkerSetStatus,
    LeaderWorkerTemplate, VERSION,
};

/// Periodic resync of a LeaderWorkerSet (changes of it and of its ModelServing are watched).
const RESYNC: Duration = Duration::from_secs(300);
/// Retry of a LeaderWorkerSet whose ModelServing's name is held by one it does not own.
const TAKEN_REQUEUE: Duration = Duration::from_secs(30);

/// Whether the API server serves the LeaderWorkerSet kind in `leaderworkerset.x-k8s.io/v1`
/// (API discovery; Go `ResourceExists`). A 404 is `false`.
///
/// # Errors
/// [`Error::Kube`] for any other discovery failure.
pub async fn served(client: &Client) -> Result<bool> {
    match client.list_api_group_resources(API_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.kind == KIND)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(kube_err(format!("discovering {API_VERSION}"))(e)),
    }
}

struct Ctx {
    client: Client,
    field_manager: String,
    recorder: Recorder,
    /// The Warning events published for each LeaderWorkerSet's generation (`FailedCreate`):
    /// each once, not once per retry.
    warned: Memo<Warnings>,
}

/// Runs the LeaderWorkerSet controller until `shutdown` completes, when the CRD is served
/// now ([`served`]); otherwise logs that LWS support is disabled and returns at once (Go
/// checks once, at start: a CRD installed later needs a restart). `namespace`: watch only
/// it (all namespaces when `None`).
pub async fn run(
    client: Client,
    namespace: Option<String>,
    field_manager: String,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    match served(&client).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!("LeaderWorkerSet CRD not found, LWS support disabled");
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "Failed to initialize LWS controller");
            return;
        }
    }
    let (sets, servings) = match &namespace {
        Some(ns) => (
            Api::<LeaderWorkerSet>::namespaced(client.clone(), ns),
            Api::<ModelServing>::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let reporter = Reporter {
        controller: field_manager.clone(),
        instance: None,
    };
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        field_manager,
        warned: Memo::default(),
    });
    tracing::info!("ModelServing lws controller started");
    let memo = Arc::clone(&ctx);
    Controller::new(sets, watcher::Config::default())
        .owns(servings, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            let ctx = Arc::clone(&memo);
            async move {
                match res {
                    Ok((obj, _)) => tracing::debug!(leaderworkerset = %obj, "reconciled"),
                    Err(controller::Error::ReconcilerFailed(..)) => {}
                    Err(controller::Error::QueueError(e)) => {
                        tracing::warn!(error = %crate::error::watch_message(&e), "watch failed; retrying");
                    }
                    // Deleted before its reconcile (or its ModelServing's event after that).
                    Err(controller::Error::ObjectNotFound(obj)) => {
                        tracing::debug!(leaderworkerset = %obj, "deleted; nothing to reconcile");
                        ctx.warned.forget(obj.namespace.as_deref(), &obj.name);
                    }
                    Err(e) => tracing::warn!(error = %e, "reconcile failed"),
                }
            }
        })
        .await;
}

fn error_policy(_lws: Arc<LeaderWorkerSet>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(error = %err, "LeaderWorkerSet reconcile failed; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

/// Go `syncHandler`: create the ModelServing, or write the built spec over it when it
/// differs, then write the LeaderWorkerSet status from it.
async fn reconcile(lws: Arc<LeaderWorkerSet>, ctx: Arc<Ctx>) -> Result<Action> {
    if lws.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (ns, name) = (lws.namespace().unwrap_or_default(), lws.name_any());
    let desired = model_serving(&lws);
    let api: Api<ModelServing> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PostParams {
        field_manager: Some(ctx.field_manager.clone()),
        ..PostParams::default()
    };
    let stored = api
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading modelserving {ns}/{name}")))?;
    let ms = match stored {
        None => {
            tracing::info!(leaderworkerset = %name, "creating its ModelServing");
            match api.create(&pp, &desired).await {
                Ok(ms) => ms,
                Err(e) => {
                    let e = kube_err(format!("creating modelserving {ns}/{name}"))(e);
                    if ctx
                        .warned
                        .first_warning(&*lws, "FailedCreate", &e.to_string())
                    {
                        warn(&ctx.recorder, &lws, "FailedCreate", e.to_string()).await;
                    }
                    return Err(e);
                }
            }
        }
        Some(ms) if !controlled_by(&ms, &lws) => {
            taken(&ctx.recorder, &lws).await;
            return Ok(Action::requeue(TAKEN_REQUEUE));
        }
        Some(mut ms) if spec_differs(&ms, &desired) => {
            tracing::info!(leaderworkerset = %name, "updating its ModelServing");
            ms.spec = desired.spec;
            api.replace(&name, &pp, &ms)
                .await
                .map_err(kube_err(format!("updating modelserving {ns}/{name}")))?
        }
        Some(ms) => ms,
    };
    if let Some(patch) = status_patch(&lws, &ms) {
        let sets: Api<LeaderWorkerSet> = Api::namespaced(ctx.client.clone(), &ns);
        let params = PatchParams {
            field_manager: Some(ctx.field_manager.clone()),
            ..PatchParams::default()
        };
        sets.patch_status(&name, &params, &Patch::Merge(patch))
            .await
            .map_err(kube_err(format!(
                "updating status of leaderworkerset {ns}/{name}"
            )))?;
    }
    Ok(Action::requeue(RESYNC))
}

/// Logs and records (Warning event `ModelServingExists` on the LeaderWorkerSet) that a
/// ModelServing of its name exists that it does not own: it is left alone (Go writes the
/// LeaderWorkerSet's spec over it).
async fn taken(recorder: &Recorder, lws: &LeaderWorkerSet) {
    let name = lws.name_any();
    let note = format!(
        "ModelServing {name} exists and is not owned by this LeaderWorkerSet; it is left unchanged"
    );
    tracing::warn!(leaderworkerset = %name, "{note}");
    warn(recorder, lws, "ModelServingExists", note).await;
}

/// Publishes a Warning event `reason` on the LeaderWorkerSet; a failure is logged, never
/// fails the reconcile. (A `FailedCreate`: the API server refused its ModelServing, e.g. the
/// webhook; the note is the error, with the API server's message.)
async fn warn(recorder: &Recorder, lws: &LeaderWorkerSet, reason: &str, note: String) {
    let ev = Event {
        type_: EventType::Warning,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &lws.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing an event failed");
    }
}

#[cfg(test)]
mod tests;
