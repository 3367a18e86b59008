//! ModelBooster: the children Go Kthena's ModelBooster controller generates from one
//! `ModelBooster` (`pkg/model-booster-controller/convert`), as pure functions.
//!
//! The generated [`ModelServing`](kthena_api::ModelServing) ([`model_serving`], Go's
//! `vllm.yaml` and `vllm-pd.yaml` templates), [`ModelServer`](kthena_api::ModelServer)
//! ([`model_server`]) and [`ModelRoute`](kthena_api::ModelRoute) ([`model_route`]) with
//! Go's names, labels, owner references, engine command, engine port and kv-connector
//! mapping; [`writes`] and [`status`] decide a reconcile from what exists, and
//! [`run_booster`] is the `modelbooster` controller that applies them (see
//! `docs/model-booster.md`).

mod config;
mod controller;
mod engine;
mod reconcile;
mod route;
mod server;
mod serving;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kthena_api::ModelBooster;
use kthena_api::workload::API_VERSION;
use kube::ResourceExt as _;

pub use config::{CONFIG_MAP_NAME, DOWNLOADER_IMAGE_KEY, RUNTIME_IMAGE_KEY, load_images};
pub use controller::{BoosterConfig, run_booster};
pub use engine::{cache_path, engine_args, engine_command, model_dir};
pub use reconcile::{
    ACTIVE, Children, Existing, FAILED, INITIALIZED, Outcome, Writes, desired, serving_available,
    status, writes,
};
pub use route::{RULE_NAME, model_route};
pub use server::{engine_port, kv_connector, model_server, served_model_name};
pub use serving::{Images, model_serving, serving_revision};

/// Label on every child: the ModelBooster's name.
pub const MODEL_NAME_LABEL: &str = "workload.serving.volcano.sh/model-name";
/// Label on every child: the backend's name (`""` on the ModelRoute).
pub const BACKEND_NAME_LABEL: &str = "workload.serving.volcano.sh/backend-name";
/// Label on every child: `workload.serving.volcano.sh` (the API group).
pub const MANAGED_BY_LABEL: &str = "workload.serving.volcano.sh/managed-by";
/// Label on every child: the hash of what it was generated from (its spec, or the backend
/// for the ModelServing); a child is updated only when it changes.
pub const REVISION_LABEL: &str = "workload.serving.volcano.sh/revision";
/// Label on every child, and the ModelServer's workload selector: the ModelBooster's UID.
pub const MODEL_UID_LABEL: &str = "workload.serving.volcano.sh/model-uid";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "workload.serving.volcano.sh";

/// Go's `GetBackendResourceName`: `<booster>-<backend>`, or `<booster>` when the backend
/// has no name.
#[must_use]
pub fn backend_resource_name(booster: &str, backend: &str) -> String {
    if backend.is_empty() {
        booster.to_owned()
    } else {
        format!("{booster}-{backend}")
    }
}

/// Go's `GetModelControllerLabels`: model name, backend name, managed-by, revision, UID.
#[must_use]
pub fn child_labels(
    booster: &ModelBooster,
    backend: &str,
    revision: &str,
) -> BTreeMap<String, String> {
    [
        (MODEL_NAME_LABEL, booster.name_any()),
        (BACKEND_NAME_LABEL, backend.to_owned()),
        (MANAGED_BY_LABEL, MANAGED_BY.to_owned()),
        (REVISION_LABEL, revision.to_owned()),
        (MODEL_UID_LABEL, booster.uid().unwrap_or_default()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Go's `NewModelOwnerRef`: the ModelBooster as controller, `blockOwnerDeletion: true`.
#[must_use]
pub fn booster_owner_ref(booster: &ModelBooster) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: "ModelBooster".to_owned(),
        name: booster.name_any(),
        uid: booster.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A worker's `config` field `key` (Go `TryGetField`); `None` when absent or no config.
fn config_field<'a>(
    worker: &'a kthena_api::workload::ModelWorker,
    key: &str,
) -> Option<&'a serde_json::Value> {
    worker.config.as_ref()?.get(key)
}

#[cfg(test)]
mod tests;
