//! The ModelServing controller: turns each `ModelServing` into ServingGroups of entry and
//! worker pods with headless services, scales them at both levels and writes the status
//! users and autoscalers read, with Go Kthena's names, labels, env and order of deletion
//! (Go `pkg/model-serving-controller`).
//!
//! The decisions are pure functions of the ModelServing and what exists, with no API
//! calls: `observed` groups the owned pods and services, `plan` returns what to delete and
//! create (in Go's reconcile order: ServingGroup replicas, role replicas, headless services)
//! with the pods of `desired`, the deletions of `rolling` and `recovery` and the revisions
//! of `revision`, and `status` the new status (with the counts of `view`). [`run`]
//! (`controller`) is the kube-runtime `Controller` that watches, plans and applies; `memo`
//! is what it remembers between reconciles (the pods whose create the API server refused,
//! which the plan creates again rather than recovering their role replica, and the Warning
//! events already published).
//!
//! With the Volcano PodGroup CRD and `schedulerName: volcano`, `podgroup` gives each
//! ServingGroup its PodGroup, created before the group's pods (`gang` discovers the CRD and
//! applies them).
//!
//! `spec.plugins` runs Go's plugin framework ([`plugins`]): each plugin mutates the pods
//! to create before they are created. When the API server serves LeaderWorkerSet, [`lws`]
//! serves each LeaderWorkerSet through a ModelServing, as Go does.
//!
//! With `--debug-port`, [`serve_debug`] dumps what the last reconciles saw and planned
//! ([`ServingCache`]) on Go's `GET /debug/modelserving/cache`.

mod cache;
mod caches;
mod controller;
mod desired;
mod gang;
pub mod lws;
mod memo;
mod observed;
mod plan;
pub mod plugins;
mod podgroup;
mod recovery;
pub(crate) mod revision;
mod rolling;
mod status;
mod view;

pub use cache::{CACHE_PATH, CachedGroup, CachedRole, ServingCache, serve_debug};
pub use controller::Config;
pub use observed::running_and_ready;

/// Runs the ModelServing controller until `shutdown` completes: watches ModelServings and
/// the pods and services carrying `modelserving.volcano.sh/group-name`, and reconciles each
/// changed ModelServing (errors are logged and retried after 5 s). Next to it, when the
/// LeaderWorkerSet CRD is served at start, the LeaderWorkerSet controller ([`lws::run`]),
/// as Go starts it with the ModelServing controller.
pub async fn run(
    client: kube::Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    use futures_util::FutureExt as _;
    let shutdown = shutdown.shared();
    let lws = lws::run(
        client.clone(),
        config.namespace.clone(),
        config.field_manager.clone(),
        shutdown.clone(),
    );
    futures_util::join!(controller::run(client, config, shutdown), lws);
}

#[cfg(test)]
mod tests;
