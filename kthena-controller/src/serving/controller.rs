//! The kube-runtime side: watch ModelServings and their pods and services (kept in watch
//! caches), read the owned children from the caches, [`plan`](crate::serving::plan::plan())
//! and apply the result, write the status.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kthena_api::ModelServing;
use kthena_api::workload::ModelServingStatus;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::json;

use crate::error::{Error, Result, kube_err};
use crate::names::{GROUP_NAME_LABEL, NAME_LABEL, ROLE_ID_LABEL, ROLE_LABEL};
use crate::serving::cache::{RoleEvent, ServingCache};
use crate::serving::caches::ChildCaches;
use crate::serving::memo::{Memo, NotCreated, Warnings};
use crate::serving::observed::{Observed, RecordedRevision};
use crate::serving::plan::{Plan, plan};
use crate::serving::plugins;
use crate::serving::revision::{controller_revision, model_serving_revision, recorded_roles};
use crate::serving::status::status;
use crate::serving::view::group_partition;

/// Go requeues after this when children of an older same-named ModelServing remain.
const FOREIGN_REQUEUE: Duration = Duration::from_secs(1);
/// Periodic resync of a ModelServing with nothing to wait for.
const RESYNC: Duration = Duration::from_secs(300);
/// Retry of a ModelServing one of whose children's names is taken by an object it does not
/// own (nothing watches that object, so its removal is noticed by this retry).
const NAME_TAKEN_REQUEUE: Duration = Duration::from_secs(10);

/// What [`run`] watches and how many ModelServings it reconciles at once.
#[derive(Debug, Clone)]
pub struct Config {
    /// Watch only this namespace (all namespaces when `None`, as Go).
    pub namespace: Option<String>,
    /// ModelServings reconciled concurrently (Go `--workers`, default 5).
    pub workers: u16,
    /// Field manager of the writes (`metadata.managedFields[].manager`), default
    /// `kthena-controller`.
    pub field_manager: String,
    /// Where each reconcile records its ServingGroups and role replicas (dumped by
    /// [`super::serve_debug`]).
    pub cache: ServingCache,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace: None,
            workers: 5,
            field_manager: "kthena-controller".to_owned(),
            cache: ServingCache::default(),
        }
    }
}

struct Ctx {
    client: Client,
    field_manager: String,
    podgroups: crate::serving::gang::Discovery,
    cache: ServingCache,
    recorder: Recorder,
    /// The watch caches of the pods and services carrying `modelserving.volcano.sh/group-name`.
    children: ChildCaches,
    /// The Warning events published for each ModelServing's generation (`InvalidSpec`,
    /// `PluginFailed`, `FailedCreate`): each once, not once per retry.
    warned: Memo<Warnings>,
    /// The pods of each ModelServing's generation whose create the API server refused, until
    /// they exist: missing, not lost ([`Observed::not_created`]).
    refused: Memo<NotCreated>,
}

/// Publishes an event on the ModelServing, related to `secondary`; a failure is logged,
/// never fails the reconcile. The recorder folds events of the same type, reason and
/// related object into one series.
async fn emit(
    recorder: &Recorder,
    ms: &ModelServing,
    type_: EventType,
    reason: &'static str,
    note: String,
    secondary: Option<ObjectReference>,
) {
    let ev = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary,
    };
    if let Err(e) = recorder.publish(&ev, &ms.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "publishing an event failed");
    }
}

/// A reference to the Pod or Service `name` in the ModelServing's namespace.
fn child_ref(ms: &ModelServing, kind: &str, name: String) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some(kind.to_owned()),
        name: Some(name),
        namespace: ms.namespace(),
        ..ObjectReference::default()
    }
}

/// Publishes a role event (Go's recorder, type Normal), related to the role replica's
/// entry pod.
async fn publish(recorder: &Recorder, ms: &ModelServing, event: RoleEvent) {
    let pod = child_ref(ms, "Pod", event.entry_pod);
    let (reason, note) = (event.reason, event.message);
    emit(recorder, ms, EventType::Normal, reason, note, Some(pod)).await;
}

/// Logs and records (Warning event `InvalidSpec`, once per generation) that the ModelServing
/// breaks the webhook's rules: it got in without the webhook (not installed, or created
/// before it was), and is reconciled anyway, as Go does, but whatever goes wrong next has its
/// reason on the object.
async fn publish_invalid(ctx: &Ctx, ms: &ModelServing, errors: &[kthena_api::FieldError]) {
    let mut message = crate::error::rejection("ModelServing", errors);
    // An event's note holds at most 1 KiB.
    if message.len() > 1000 {
        let mut end = 1000;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" ...");
    }
    if !ctx.warned.first_warning(ms, "InvalidSpec", &message) {
        return;
    }
    let key = format!("{}/{}", ms.namespace().unwrap_or_default(), ms.name_any());
    tracing::warn!(modelserving = %key, %message, "The ModelServing breaks the webhook's rules");
    let recorder = &ctx.recorder;
    emit(
        recorder,
        ms,
        EventType::Warning,
        "InvalidSpec",
        message,
        None,
    )
    .await;
}

/// Logs and records (Warning event `NameTaken`, related to the object) that `other` holds the
/// name of one of the ModelServing's children without being its own.
async fn publish_name_taken(recorder: &Recorder, ms: &ModelServing, other: ObjectReference) {
    let key = format!("{}/{}", ms.namespace().unwrap_or_default(), ms.name_any());
    let kind = other.kind.as_deref().unwrap_or_default().to_lowercase();
    let object = format!("{kind}/{}", other.name.as_deref().unwrap_or_default());
    tracing::warn!(modelserving = %key, %object, "A child's name is taken by an object this ModelServing does not own; its group cannot start until that object is removed");
    let note = format!(
        "{object} exists and is not owned by this ModelServing; remove it so the group can start"
    );
    emit(
        recorder,
        ms,
        EventType::Warning,
        "NameTaken",
        note,
        Some(other),
    )
    .await;
}

/// The ModelServing controller of [`crate::serving::run`].
pub(crate) async fn run(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (ms, pods, svcs) = match &config.namespace {
        Some(ns) => (
            Api::<ModelServing>::namespaced(client.clone(), ns),
            Api::<Pod>::namespaced(client.clone(), ns),
            Api::<Service>::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    let children = watcher::Config::default().labels(GROUP_NAME_LABEL);
    let reporter = Reporter {
        controller: config.field_manager.clone(),
        instance: None,
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let (pod_store, pod_events) = reflected(pods, children.clone());
    let (svc_store, svc_events) = reflected(svcs, children.clone());
    let ctx = Arc::new(Ctx {
        client,
        field_manager: config.field_manager.clone(),
        podgroups: crate::serving::gang::Discovery::default(),
        cache: config.cache.clone(),
        recorder,
        warned: Memo::default(),
        refused: Memo::default(),
        children: ChildCaches::new(pod_store, svc_store),
    });
    let mut controller = Controller::new(ms, watcher::Config::default())
        .owns_stream(pod_events)
        .owns_stream(svc_events);
    config.cache.follow(controller.store());
    let ns = config.namespace.as_deref();
    if let Some(pgs) = crate::serving::gang::watched_api(&ctx.podgroups, &ctx.client, ns).await {
        controller = controller.owns(pgs, children);
    }
    let memo = Arc::clone(&ctx);
    controller
        .trigger_backoff(trigger_backoff())
        .with_config(controller::Config::default().concurrency(config.workers))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            let ctx = Arc::clone(&memo);
            async move {
                match res {
                    Ok((obj, _)) => tracing::debug!(modelserving = %obj, "reconciled"),
                    // A failed reconcile is logged by `error_policy`.
                    Err(controller::Error::ReconcilerFailed(..)) => {}
                    Err(controller::Error::QueueError(e)) => {
                        tracing::warn!(error = %crate::error::watch_message(&e), "watch failed; retrying");
                    }
                    // Deleted before its reconcile (or a child's event after its deletion).
                    Err(controller::Error::ObjectNotFound(obj)) => {
                        tracing::debug!(modelserving = %obj, "deleted; nothing to reconcile");
                        ctx.warned.forget(obj.namespace.as_deref(), &obj.name);
                        ctx.refused.forget(obj.namespace.as_deref(), &obj.name);
                    }
                    Err(e) => tracing::warn!(error = %e, "reconcile failed"),
                }
            }
        })
        .await;
}

/// A watch cache of the `K`s `wc` selects in `api`'s scope (without their managed fields)
/// and the stream of the objects it changed, each given after the cache has it: a reconcile
/// it triggers reads the change from the cache.
fn reflected<K>(
    api: Api<K>,
    wc: watcher::Config,
) -> (
    Store<K>,
    impl futures_util::Stream<Item = std::result::Result<K, watcher::Error>> + Send + 'static,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, wc).modify(|o| o.managed_fields_mut().clear());
    (store, reflector(writer, events).touched_objects())
}

/// The ModelServing's pods and services from the watch caches (those carrying
/// `modelserving.volcano.sh/name=<name>` in its namespace), once the caches have listed
/// everything; `None` when the caches stopped (the controller is shutting down).
async fn children(ctx: &Ctx, ns: &str, name: &str) -> Option<(Vec<Pod>, Vec<Service>)> {
    if !ctx.children.ready().await {
        return None;
    }
    fn of<K: kube::Resource<DynamicType = ()> + Clone>(
        store: &Store<K>,
        ns: &str,
        name: &str,
    ) -> Vec<K> {
        store
            .state()
            .iter()
            .filter(|o| o.meta().namespace.as_deref() == Some(ns))
            .filter(|o| o.labels().get(NAME_LABEL).map(String::as_str) == Some(name))
            .map(|o| (**o).clone())
            .collect()
    }
    let c = &ctx.children;
    Some((of(&c.pods, ns, name), of(&c.services, ns, name)))
}

/// The back-off after a watch error, shared by all of the controller's watches (kube-runtime
/// pauses them together): 200 ms doubling to 2 s (with jitter, at most twice that), reset
/// after 30 s without an error. kube-runtime's default (800 ms to 30 s, reset after 2 min)
/// stalled every watch for about two minutes after an API server restart: each watch's
/// `410 Expired` on resuming, expected and answered by a re-list, added another long pause.
fn trigger_backoff() -> impl kube::runtime::utils::Backoff {
    kube::runtime::utils::ResetTimerBackoff::new(
        watcher::ExponentialBackoff::from(
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(2))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(30),
    )
}

fn error_policy(_ms: Arc<ModelServing>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(error = %err, "reconcile failed; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(ms: Arc<ModelServing>, ctx: Arc<Ctx>) -> Result<Action> {
    if ms.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ms.namespace().unwrap_or_default();
    let name = ms.name_any();
    let defaulted = (*ms).clone().with_defaults();
    if let Err(errors) = defaulted.validate() {
        publish_invalid(&ctx, &ms, &errors).await;
    }
    let Some((pod_list, svc_list)) = children(&ctx, &ns, &name).await else {
        return Ok(Action::await_change());
    };
    let mut seen = Observed::new(&name, &ms.uid().unwrap_or_default(), &pod_list, &svc_list);
    seen.current = current_revision(&ctx.client, &defaulted).await?;
    if let Some(other) = seen.foreign.first() {
        tracing::info!(modelserving = %name, child = %other, "{}", Error::Foreign(other.clone()));
        return Ok(Action::requeue(FOREIGN_REQUEUE));
    }
    let existing = pod_list.iter().filter_map(|p| p.metadata.name.as_deref());
    seen.not_created = ctx.refused.still_missing(&*ms, existing);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut plan = plan(&defaulted, &seen, now.0)?;
    let pp = PostParams {
        field_manager: Some(ctx.field_manager.clone()),
        ..PostParams::default()
    };
    let gang = crate::serving::gang::sync(&ctx.client, &ctx.podgroups, &pp, &defaulted, &mut plan);
    if let Some(other) = gang.await? {
        tracing::info!(modelserving = %name, child = %other, "{}", Error::Foreign(other.clone()));
        return Ok(Action::requeue(FOREIGN_REQUEUE));
    }
    let hooks = plugins::on_pod_create(&defaulted, &mut plan.create_pods);
    let applied = apply(&ctx, &defaulted, &plan).await?;
    for other in &applied.taken {
        publish_name_taken(&ctx.recorder, &ms, other.clone()).await;
    }
    for event in ctx.cache.record(&defaulted, &seen, &plan) {
        publish(&ctx.recorder, &ms, event).await;
    }
    write_status(&ctx, &ms, &defaulted, &plan, &now).await?;
    let hooks = hooks.and_then(|()| plugins::on_pod_ready(&defaulted, &pod_list));
    report_failures(&ctx, &ms, hooks, applied.refused).await?;
    let resync = if applied.taken.is_empty() {
        RESYNC
    } else {
        NAME_TAKEN_REQUEUE
    };
    Ok(Action::requeue(
        plan.requeue_after.map_or(resync, |d| d.min(resync)),
    ))
}

/// Writes the status of `plan` (`defaulted` is `ms` with defaults) when it changed, after
/// pruning the ControllerRevisions when its revisions changed. A 404 (the ModelServing
/// was deleted meanwhile) is not an error.
async fn write_status(
    ctx: &Ctx,
    ms: &ModelServing,
    defaulted: &ModelServing,
    plan: &Plan,
    now: &Time,
) -> Result<()> {
    let st = status(defaulted, &plan.groups, &plan.revision, now);
    let revisions = |s: Option<&ModelServingStatus>| {
        s.map(|s| (s.current_revision.clone(), s.update_revision.clone()))
    };
    if revisions(ms.status.as_ref()) != revisions(Some(&st)) {
        prune_revisions(&ctx.client, defaulted, &st).await?;
    }
    if ms.status.as_ref() == Some(&st) {
        return Ok(());
    }
    let (ns, name) = (ms.namespace().unwrap_or_default(), ms.name_any());
    let api: Api<ModelServing> = Api::namespaced(ctx.client.clone(), &ns);
    let params = PatchParams {
        field_manager: Some(ctx.field_manager.clone()),
        ..PatchParams::default()
    };
    match api
        .patch_status(&name, &params, &Patch::Merge(json!({ "status": st })))
        .await
    {
        Ok(_) => Ok(()),
        // Deleted while it was reconciled: nothing failed.
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::debug!(modelserving = %name, "deleted; its status is not written");
            Ok(())
        }
        Err(e) => Err(kube_err(format!("updating status of {ns}/{name}"))(e)),
    }
}

/// Publishes the Warning events of what failed after the plan was applied and the status
/// written: the plugin error (`PluginFailed`) and each pod the API server refused to
/// create (`FailedCreate`, as Kubernetes' workload controllers name it, related to the
/// pod, with the API server's message), each once per generation, then returns the plugin
/// error or else the first refusal, so that the reconcile is retried (after 5 s).
async fn report_failures(
    ctx: &Ctx,
    ms: &ModelServing,
    hooks: std::result::Result<(), plugins::PluginError>,
    refused: Vec<(String, Error)>,
) -> Result<()> {
    let mut first: Option<Error> = None;
    if let Err(e) = hooks {
        let note = e.to_string();
        if ctx.warned.first_warning(ms, "PluginFailed", &note) {
            emit(
                &ctx.recorder,
                ms,
                EventType::Warning,
                "PluginFailed",
                note,
                None,
            )
            .await;
        }
        first = Some(e.into());
    }
    for (pod, e) in refused {
        let note = e.to_string();
        if ctx.warned.first_warning(ms, "FailedCreate", &note) {
            let related = Some(child_ref(ms, "Pod", pod));
            emit(
                &ctx.recorder,
                ms,
                EventType::Warning,
                "FailedCreate",
                note,
                related,
            )
            .await;
        }
        first.get_or_insert(e);
    }
    first.map_or(Ok(()), Err)
}

/// What [`apply`] could not do without failing the reconcile at once.
struct Applied {
    /// The pods and services whose names are taken by objects that are not this
    /// ModelServing's.
    taken: Vec<ObjectReference>,
    /// The pods whose create failed (refused by the API server), with the error.
    refused: Vec<(String, Error)>,
}

/// Applies `plan` in order: ControllerRevision (when creating pods), group deletions,
/// role-replica deletions, errored-pod deletions, pod creations ([`create_pods`]), service
/// creations. An AlreadyExists of its own child (a list that lagged) is ignored.
async fn apply(ctx: &Ctx, ms: &ModelServing, plan: &Plan) -> Result<Applied> {
    let client = &ctx.client;
    let pp = PostParams {
        field_manager: Some(ctx.field_manager.clone()),
        ..PostParams::default()
    };
    let ns = ms.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns);
    if !plan.create_pods.is_empty() {
        let cr = controller_revision(ms, &plan.revision)?;
        let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
        create(&api, &pp, &cr, "controllerrevision").await?;
    }
    for group in &plan.delete_groups {
        tracing::info!(group, "deleting ServingGroup");
        delete_children(&pods, &svcs, &format!("{GROUP_NAME_LABEL}={group}")).await?;
    }
    for r in &plan.delete_roles {
        tracing::info!(group = %r.group, role_id = %r.role_id, "deleting role replica");
        let sel = format!(
            "{GROUP_NAME_LABEL}={},{ROLE_LABEL}={},{ROLE_ID_LABEL}={}",
            r.group, r.role, r.role_id
        );
        delete_children(&pods, &svcs, &sel).await?;
    }
    for name in &plan.delete_pods {
        tracing::info!(pod = %name, "deleting errored pod");
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(kube_err(format!("deleting pod {name}"))(e)),
        }
    }
    let mut applied = create_pods(ctx, ms, &pods, &pp, &plan.create_pods).await;
    for svc in &plan.create_services {
        if !create(&svcs, &pp, svc, "service").await? {
            applied.taken.push(child_ref(ms, "Service", svc.name_any()));
        }
    }
    Ok(applied)
}

/// Creates `to_create` in order. When the API server refuses a pod, the later pods of its
/// role replica are not tried (as Go returns at the failing pod; a worker without its entry
/// pod would only fail), the other role replicas are; the refused and untried pods are
/// recorded in `ctx.refused`, so the next reconciles create them again instead of
/// recovering their role replica as one that lost a pod.
async fn create_pods(
    ctx: &Ctx,
    ms: &ModelServing,
    pods: &Api<Pod>,
    pp: &PostParams,
    to_create: &[Pod],
) -> Applied {
    let mut applied = Applied {
        taken: Vec::new(),
        refused: Vec::new(),
    };
    let mut blocked: std::collections::BTreeSet<(String, String)> = Default::default();
    let mut not_created = Vec::new();
    for pod in to_create {
        let label = |key: &str| pod.labels().get(key).cloned().unwrap_or_default();
        let replica = (label(GROUP_NAME_LABEL), label(ROLE_ID_LABEL));
        if blocked.contains(&replica) {
            not_created.push(pod.name_any());
            continue;
        }
        match create(pods, pp, pod, "pod").await {
            Ok(true) => {}
            Ok(false) => applied.taken.push(child_ref(ms, "Pod", pod.name_any())),
            Err(e) => {
                tracing::debug!(pod = %pod.name_any(), error = %e, "pod not created");
                not_created.push(pod.name_any());
                applied.refused.push((pod.name_any(), e));
                blocked.insert(replica);
            }
        }
    }
    if !not_created.is_empty() {
        ctx.refused.not_created(ms, not_created);
    }
    applied
}

/// The roles of `status.currentRevision` from its ControllerRevision, while a partition
/// protects groups and the template has another revision (missing protected groups are
/// recreated from them); `None` when it is gone or unreadable (Go then uses the spec).
async fn current_revision(client: &Client, ms: &ModelServing) -> Result<Option<RecordedRevision>> {
    let current = ms.status.as_ref().and_then(|s| s.current_revision.clone());
    let Some(current) = current.filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    if group_partition(ms) == 0 || current == model_serving_revision(ms)? {
        return Ok(None);
    }
    let name = format!("{}-{current}", ms.name_any());
    let api: Api<ControllerRevision> =
        Api::namespaced(client.clone(), &ms.namespace().unwrap_or_default());
    let cr = api
        .get_opt(&name)
        .await
        .map_err(kube_err(format!("reading controllerrevision {name}")))?;
    let roles = cr.as_ref().and_then(recorded_roles);
    if roles.is_none() {
        tracing::warn!(controllerrevision = %name, "no recorded roles; using the spec's");
    }
    Ok(roles.map(|roles| RecordedRevision {
        revision: current,
        roles,
    }))
}

/// Deletes the ModelServing's ControllerRevisions other than the current and update
/// revisions (Go does this after a status revision change).
async fn prune_revisions(
    client: &Client,
    ms: &ModelServing,
    st: &ModelServingStatus,
) -> Result<()> {
    let name = ms.name_any();
    let api: Api<ControllerRevision> =
        Api::namespaced(client.clone(), &ms.namespace().unwrap_or_default());
    let lp = ListParams::default().labels(&format!("{NAME_LABEL}={name}"));
    let list = api
        .list(&lp)
        .await
        .map_err(kube_err(format!("listing controllerrevisions of {name}")))?;
    let keep: Vec<String> = [&st.current_revision, &st.update_revision]
        .into_iter()
        .flatten()
        .map(|rev| format!("{name}-{rev}"))
        .collect();
    for cr in list
        .items
        .iter()
        .filter(|cr| !keep.contains(&cr.name_any()))
    {
        tracing::info!(controllerrevision = %cr.name_any(), "deleting outdated ControllerRevision");
        match api.delete(&cr.name_any(), &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => {
                return Err(kube_err(format!(
                    "deleting controllerrevision {}",
                    cr.name_any()
                ))(e));
            }
        }
    }
    Ok(())
}

/// Creates `obj`; `false` when its name is taken by an object not owned by the owner of
/// `obj` (a 409 for an object with the same controller owner is a list that lagged: `true`).
async fn create<K>(api: &Api<K>, pp: &PostParams, obj: &K, kind: &str) -> Result<bool>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.name_any();
    match api.create(pp, obj).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api
                .get_opt(&name)
                .await
                .map_err(kube_err(format!("reading {kind} {name}")))?;
            let owner = |o: &K| {
                o.owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true))
                    .map(|r| r.uid.clone())
            };
            // Gone again since (deleted meanwhile): the next pass creates it.
            Ok(existing.is_none_or(|e| owner(&e).is_some() && owner(&e) == owner(obj)))
        }
        Err(e) => Err(kube_err(format!("creating {kind} {name}"))(e)),
    }
}

async fn delete_children(pods: &Api<Pod>, svcs: &Api<Service>, selector: &str) -> Result<()> {
    let lp = ListParams::default().labels(selector);
    pods.delete_collection(&DeleteParams::default(), &lp)
        .await
        .map_err(kube_err(format!("deleting pods {selector}")))?;
    let list = svcs
        .list(&lp)
        .await
        .map_err(kube_err(format!("listing services {selector}")))?;
    for svc in list.items {
        match svcs.delete(&svc.name_any(), &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(kube_err(format!("deleting service {}", svc.name_any()))(e)),
        }
    }
    Ok(())
}
