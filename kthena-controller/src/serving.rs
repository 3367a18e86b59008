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
//! (`controller`) is the kube-runtime `Controller` that watches, plans and applies.
//!
//! With the Volcano PodGroup CRD and `schedulerName: volcano`, `podgroup` gives each
//! ServingGroup its PodGroup, created before the group's pods (`gang` discovers the CRD and
//! applies them).
//!
//! With `--debug-port`, [`serve_debug`] dumps what the last reconciles saw and planned
//! ([`ServingCache`]) on Go's `GET /debug/modelserving/cache`.

mod cache;
mod caches;
mod controller;
mod desired;
mod gang;
mod observed;
mod plan;
mod podgroup;
mod recovery;
pub(crate) mod revision;
mod rolling;
mod status;
mod view;

pub use cache::{CACHE_PATH, CachedGroup, CachedRole, ServingCache, serve_debug};
pub use controller::{Config, run};
pub use observed::running_and_ready;

#[cfg(test)]
mod tests;
