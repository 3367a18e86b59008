//! Kthena's ModelServing controller: turns each `ModelServing` into ServingGroups of entry
//! and worker pods with headless services, scales them at both levels and writes the status
//! users and autoscalers read, with Go Kthena's names, labels, env and order of deletion.
//!
//! The decisions are pure functions of the ModelServing and what exists, with no API
//! calls: [`Observed::new`] groups the owned pods and services, [`plan()`] returns what to
//! delete and create (in Go's reconcile order: ServingGroup replicas, role replicas,
//! headless services) and [`status()`] the new status. [`run`] is the kube-runtime
//! `Controller` that lists, plans and applies; `kthena-controller` is its binary.
//!
//! [`run_leader_elected`] runs it only while holding Go's Lease.
//!
//! With the Volcano PodGroup CRD and `schedulerName: volcano`, [`plan_pod_groups`] gives
//! each ServingGroup its PodGroup, created before the group's pods.
//!
//! With `--debug-port`, [`serve_debug`] dumps what the last reconciles saw and planned
//! ([`ServingCache`]) on Go's `GET /debug/modelserving/cache`.
//!
//! [`booster`] generates the children of a ModelBooster (its ModelServing, ModelServer and
//! ModelRoute) as Go's `convert` package does; [`run_booster`] is the `modelbooster`
//! controller that writes them.
//!
//! [`run_autoscaler`] is the `autoscaler` controller: it scales ModelServings on their
//! engines' metrics with `kthena-autoscale` (see `docs/autoscaler.md`).
//!
//! [`serve_webhook`] is the TLS admission webhook server for every Kthena kind
//! ([`admission::review`] is its pure handler).

pub mod admission;
#[cfg(test)]
mod admission_tests;
mod autoscaler;
pub mod booster;
mod cache;
mod controller;
mod desired;
mod error;
mod gang;
mod health;
mod leader;
pub mod names;
mod observed;
mod plan;
mod podgroup;
mod quantity;
mod ratelimit;
mod recovery;
mod revision;
mod rolling;
mod status;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
mod view;
mod webhook;

pub use autoscaler::{AutoscalerConfig, DEFAULT_SYNC_PERIOD, run_autoscaler};
pub use booster::{BoosterConfig, run_booster};
pub use cache::{
    CACHE_PATH, CachedGroup, CachedRole, RoleEvent, ServingCache, cache_entry, role_events,
    serve_debug,
};
pub use controller::{Config, ControllerSet, run};
pub use desired::{RoleReplicaRef, headless_service, role_replica_pods};
pub use error::{Error, Result};
pub use health::serve_health;
pub use leader::{LEASE_NAME, LeaderElection, identity, run_leader_elected};
pub use observed::{
    Observed, ObservedGroup, ObservedRole, RecordedRevision, ReplicaStatus, errored_since,
    running_and_ready,
};
pub use plan::{Plan, RoleReplicaId, group_status, plan, scale_down_order};
pub use podgroup::{
    GROUP_NAME_ANNOTATION, PodGroupPlan, QUEUE_ANNOTATION, TASK_SPEC_ANNOTATION, VOLCANO,
    annotate_pod, crd_has_sub_groups, gang_scheduled, min_role_replicas, plan_pod_groups,
    pod_group,
};
pub use ratelimit::rate_limit;
pub use recovery::ReplicaCheck;
pub use revision::{
    controller_revision, model_serving_revision, recorded_roles, role_template_hash,
};
pub use rolling::{max_unavailable, role_rolling_deletions, rolling_update_deletions};
pub use status::{AVAILABLE, PROGRESSING, UPDATE_IN_PROGRESS, set_condition, status};
pub use view::{GroupView, group_partition, role_status, scaled_value};
pub use webhook::{
    CERT_SECRET_NAME, Certificate, MUTATING_WEBHOOK, SERVICE_NAME, VALIDATING_WEBHOOK,
    WEBHOOK_TIMEOUT, generate_certificate, load_certificate, patch_ca_bundle, secret_certificate,
    serve_webhook, service_hosts,
};
