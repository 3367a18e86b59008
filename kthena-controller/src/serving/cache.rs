//! The ServingGroup/Role view of every reconciled ModelServing, kept in memory and dumped
//! as JSON on `GET /debug/modelserving/cache` (Go Kthena `datastore.DumpCache`, served on
//! `--debug-port`).
//!
//! Go keeps this tree as its store and decides from it; here the decisions come from the
//! pods listed at each reconcile ([`Observed`]), and the tree is what the last
//! reconcile saw and planned, so the dump answers the same question: which groups and role
//! replicas does the controller think exist, at which revision, in which state.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::routing::get;
use axum::{Json, Router};
use kthena_api::ModelServing;
use kube::ResourceExt as _;
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::error::{Error, Result};
use crate::names::{GROUP_NAME_LABEL, REVISION_LABEL, ROLE_ID_LABEL, ROLE_LABEL};
use crate::names::{ROLE_TEMPLATE_HASH_LABEL, group_name};
use crate::serving::observed::{Observed, ReplicaStatus};
use crate::serving::plan::Plan;
use crate::serving::view::role_status;

/// Path of the dump (Go's).
pub const CACHE_PATH: &str = "/debug/modelserving/cache";

/// One role replica in the dump (Go `ExportedRole`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedRole {
    /// Role id `<role>-<r>`.
    pub name: String,
    /// Revision label of its pods.
    pub revision: String,
    /// Role template hash label of its pods.
    pub role_template_hash: String,
    /// `Creating`, `Running` or `Deleting`.
    pub status: &'static str,
}

/// One ServingGroup in the dump (Go `ExportedServingGroup`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedGroup {
    /// Group name `<ms>-<g>`.
    pub name: String,
    /// Its pods that are Running and Ready, sorted.
    pub running_pods: Vec<String>,
    /// Revision of the group.
    pub revision: String,
    /// `Creating`, `Running` or `Deleting`.
    pub status: &'static str,
    /// Role name → role id → role replica.
    pub roles: BTreeMap<String, BTreeMap<String, CachedRole>>,
}

/// Go's name of a status.
fn status_name(status: ReplicaStatus) -> &'static str {
    match status {
        ReplicaStatus::Creating => "Creating",
        ReplicaStatus::Running => "Running",
        ReplicaStatus::Deleting => "Deleting",
    }
}

/// The groups of `ms` after a reconcile: every group of `plan.groups` with the status the
/// plan gives it; its role replicas as observed (Deleting when the plan deletes them or
/// their group), plus the ones the plan creates (Creating).
#[must_use]
pub(crate) fn cache_entry(
    ms: &ModelServing,
    seen: &Observed,
    plan: &Plan,
) -> BTreeMap<String, CachedGroup> {
    let mut out = BTreeMap::new();
    for view in &plan.groups {
        let name = group_name(&ms.name_any(), view.ordinal);
        let deleting = view.status == ReplicaStatus::Deleting;
        let mut group = CachedGroup {
            name: name.clone(),
            running_pods: Vec::new(),
            revision: view.revision.clone(),
            status: status_name(view.status),
            roles: BTreeMap::new(),
        };
        let observed = seen.groups.get(&view.ordinal);
        for (role_name, replicas) in observed.map(|g| &g.roles).into_iter().flatten() {
            let spec = ms.spec.template.roles.iter().find(|r| &r.name == role_name);
            for (&r, replica) in replicas {
                let id = crate::names::role_id(role_name, r);
                group
                    .running_pods
                    .extend(replica.running_pods.iter().cloned());
                let removed = plan
                    .delete_roles
                    .iter()
                    .any(|d| d.group == name && d.role_id == id);
                let status = match spec {
                    _ if deleting || removed => ReplicaStatus::Deleting,
                    Some(spec) => role_status(spec, replica),
                    None if replica.pods.is_empty() => ReplicaStatus::Deleting,
                    None => ReplicaStatus::Creating,
                };
                let role = CachedRole {
                    name: id.clone(),
                    revision: replica.revision.clone(),
                    role_template_hash: replica.template_hash.clone(),
                    status: status_name(status),
                };
                group
                    .roles
                    .entry(role_name.clone())
                    .or_default()
                    .insert(id, role);
            }
        }
        group.running_pods.sort();
        out.insert(name, group);
    }
    for pod in &plan.create_pods {
        let label = |k: &str| pod.labels().get(k).cloned().unwrap_or_default();
        let Some(group) = out.get_mut(&label(GROUP_NAME_LABEL)) else {
            continue;
        };
        let replicas = group.roles.entry(label(ROLE_LABEL)).or_default();
        let id = label(ROLE_ID_LABEL);
        replicas.entry(id.clone()).or_insert_with(|| CachedRole {
            name: id,
            revision: label(REVISION_LABEL),
            role_template_hash: label(ROLE_TEMPLATE_HASH_LABEL),
            status: status_name(ReplicaStatus::Creating),
        });
    }
    out
}

/// A role replica's status change, published as a Kubernetes Event on the ModelServing
/// (Go's `emitRoleStatusEvent`, type Normal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleEvent {
    /// `RoleRunning`, `RoleCreating` or `RoleDeleting`.
    pub reason: &'static str,
    /// `Role <role>/<roleId> in ServingGroup <group> is now Running` (or `Creating`,
    /// `Deleting`).
    pub message: String,
    /// The role replica's entry pod (`<group>-<roleId>-0`), the event's related object, so
    /// that the events of different role replicas are not merged into one series.
    pub entry_pod: String,
}

/// The role events between two records of one ModelServing: `RoleRunning` for a role
/// replica that is now Running and was not, `RoleCreating` for one that is now Creating and
/// was not (absent: created; Deleting: recreated by recovery; Running: a pod failed),
/// `RoleDeleting` for one that is now Deleting and was not while its group is not Deleting
/// (a role scale-down or a role recreated by recovery: Go's `DeleteRole` in
/// `pkg/model-serving-controller/controller/model_serving_controller.go`; a whole group's
/// deletion emits no role event there). Groups by name, role replicas by role and id, in
/// that order.
#[must_use]
pub(crate) fn role_events(
    previous: Option<&BTreeMap<String, CachedGroup>>,
    next: &BTreeMap<String, CachedGroup>,
) -> Vec<RoleEvent> {
    let mut out = Vec::new();
    for (group, g) in next {
        for (role, replicas) in &g.roles {
            for (id, replica) in replicas {
                let before = previous
                    .and_then(|p| p.get(group))
                    .and_then(|g| g.roles.get(role))
                    .and_then(|r| r.get(id))
                    .map(|r| r.status);
                let reason = match (before, replica.status) {
                    (Some(b), now) if b == now => continue,
                    (_, "Running") => "RoleRunning",
                    (_, "Creating") => "RoleCreating",
                    (_, "Deleting") if g.status != "Deleting" => "RoleDeleting",
                    _ => continue,
                };
                let state = reason.strip_prefix("Role").unwrap_or(reason);
                out.push(RoleEvent {
                    reason,
                    message: format!("Role {role}/{id} in ServingGroup {group} is now {state}"),
                    entry_pod: crate::names::pod_name(group, id, 0),
                });
            }
        }
    }
    out
}

#[derive(Default)]
struct Inner {
    /// `<namespace>/<name>` → group name → group.
    entries: BTreeMap<String, BTreeMap<String, CachedGroup>>,
    /// The controller's ModelServings: entries of ModelServings gone from it are not dumped.
    live: Option<Store<ModelServing>>,
}

/// The in-memory view dumped by [`serve_debug`]; cheap to clone (shared). [`super::run`]
/// fills the one in its [`super::Config`].
#[derive(Clone, Default)]
pub struct ServingCache(Arc<Mutex<Inner>>);

impl std::fmt::Debug for ServingCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCache").finish_non_exhaustive()
    }
}

impl ServingCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the groups of `ms` after a reconcile (see [`cache_entry`]) and returns the
    /// [`role_events`] since the previous record.
    pub fn record(&self, ms: &ModelServing, seen: &Observed, plan: &Plan) -> Vec<RoleEvent> {
        let key = format!("{}/{}", ms.namespace().unwrap_or_default(), ms.name_any());
        let entry = cache_entry(ms, seen, plan);
        let mut inner = self.lock();
        let events = role_events(inner.entries.get(&key), &entry);
        inner.entries.insert(key, entry);
        events
    }

    /// From now on, dump only the ModelServings present in `store` (the controller's).
    pub(crate) fn follow(&self, store: Store<ModelServing>) {
        self.lock().live = Some(store);
    }

    /// The dump: `{"<namespace>/<name>": {"<group>": group}}`, as Go's JSON.
    #[must_use]
    pub fn dump(&self) -> BTreeMap<String, BTreeMap<String, CachedGroup>> {
        let inner = self.lock();
        let live = |key: &str| {
            let Some(store) = &inner.live else {
                return true;
            };
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            store
                .get(&ObjectRef::new(name).within(ns))
                .is_some_and(|ms| ms.metadata.deletion_timestamp.is_none())
        };
        inner
            .entries
            .iter()
            .filter(|(k, _)| live(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Binds `addr` (Go binds localhost:`--debug-port`) and returns the bound address and a
/// future serving `GET /debug/modelserving/cache` (200, the JSON of [`ServingCache::dump`])
/// until it is dropped.
///
/// # Errors
/// [`Error::Listen`] if the address cannot be bound.
pub async fn serve_debug(
    addr: SocketAddr,
    cache: ServingCache,
) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| Error::Listen { addr, source })?;
    let app = Router::new().route(
        CACHE_PATH,
        get(move || {
            let cache = cache.clone();
            async move { Json(cache.dump()) }
        }),
    );
    Ok((local, async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "debug server stopped");
        }
    }))
}

#[cfg(test)]
mod tests;
