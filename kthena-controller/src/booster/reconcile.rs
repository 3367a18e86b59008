//! What the ModelBooster controller does, as pure functions of the booster and what exists
//! (Go `controller/model_booster_controller.go`, `model_serving_handler.go`,
//! `model_route_handler.go`, `condition.go`): which children to write, which to delete, and
//! the booster's new status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kthena_api::workload::ModelBoosterStatus;
use kthena_api::{ModelBooster, ModelRoute, ModelServer, ModelServing};
use kube::ResourceExt as _;

use super::{Images, REVISION_LABEL, model_route, model_server, model_serving};
use kthena_api::conditions::set_status_condition;

use crate::error::Result;

/// Condition type: the booster was seen (reason `ModelCreating`).
pub const INITIALIZED: &str = "Initialized";
/// Condition type: the generated ModelServing is available (`ModelAvailable`) or not yet
/// (`ModelProcessing`).
pub const ACTIVE: &str = "Active";
/// Condition type: generating or writing a child failed (`ModelAbnormal`, the error).
pub const FAILED: &str = "Failed";

/// The three children Go generates for a booster.
#[derive(Debug, Clone, PartialEq)]
pub struct Children {
    /// `<booster>-<backend>`.
    pub serving: ModelServing,
    /// `<booster>-<backend>`.
    pub server: ModelServer,
    /// `<booster>`.
    pub route: ModelRoute,
}

/// Generates the children of `booster` ([`model_serving`], [`model_server`],
/// [`model_route`]).
///
/// # Errors
/// Those of the three builders.
pub fn desired(booster: &ModelBooster, images: &Images) -> Result<Children> {
    Ok(Children {
        serving: model_serving(booster, images)?,
        server: model_server(booster)?,
        route: model_route(booster)?,
    })
}

/// What exists of a booster's children.
#[derive(Debug, Clone, Default)]
pub struct Existing {
    /// Every ModelServing labelled with the booster's UID (`model-uid`).
    pub servings: Vec<ModelServing>,
    /// The ModelServer `<booster>-<backend>`, if it exists.
    pub server: Option<ModelServer>,
    /// The names of the other ModelServers labelled with the booster's UID (those of a
    /// renamed backend).
    pub other_servers: Vec<String>,
    /// The ModelRoute `<booster>`, if it exists.
    pub route: Option<ModelRoute>,
}

/// The writes of one reconcile, in Go's order (ModelServing, ModelServer, ModelRoute).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Writes {
    /// Write (create or replace) the ModelServing.
    pub serving: bool,
    /// ModelServings of this booster with another name, to delete (Go: stale backends).
    pub delete_servings: Vec<String>,
    /// Write the ModelServer.
    pub server: bool,
    /// ModelServers of this booster with another name, to delete: a renamed backend's
    /// server would still select the booster's pods (not in Go, which leaves it).
    pub delete_servers: Vec<String>,
    /// Delete the existing ModelRoute first: its `modelName` changed and is immutable.
    pub recreate_route: bool,
    /// Write the ModelRoute.
    pub route: bool,
}

/// A child is written when it is missing or its revision label differs from the desired
/// one (Go compares `workload.serving.volcano.sh/revision`; nothing else, so replicas set
/// by an autoscaler are kept until the booster's spec changes).
fn stale(want: &ObjectMeta, have: Option<&ObjectMeta>) -> bool {
    let rev = |m: &ObjectMeta| {
        m.labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL))
            .cloned()
    };
    have.is_none_or(|have| rev(have) != rev(want))
}

/// What to write and delete so that `existing` becomes `want`.
#[must_use]
pub fn writes(want: &Children, existing: &Existing) -> Writes {
    let name = want.serving.name_any();
    let same = existing.servings.iter().find(|s| s.name_any() == name);
    let route = existing.route.as_ref();
    let recreate_route = route.is_some_and(|r| r.spec.model_name != want.route.spec.model_name);
    Writes {
        serving: stale(&want.serving.metadata, same.map(|s| &s.metadata)),
        delete_servings: existing
            .servings
            .iter()
            .map(|s| s.name_any())
            .filter(|n| *n != name)
            .collect(),
        server: stale(
            &want.server.metadata,
            existing.server.as_ref().map(|s| &s.metadata),
        ),
        delete_servers: existing.other_servers.clone(),
        recreate_route,
        route: recreate_route || stale(&want.route.metadata, route.map(|r| &r.metadata)),
    }
}

/// Whether a ModelServing has `Available=True`.
#[must_use]
pub fn serving_available(ms: &ModelServing) -> bool {
    let conds = ms
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    conds
        .iter()
        .any(|c| c.type_ == "Available" && c.status == "True")
}

/// How a reconcile ended, for [`status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Generating or writing a child failed with this message.
    Failed(String),
    /// The children are written; `Some(available)` when exactly one ModelServing of the
    /// booster exists (Go's `isModelServingActive`), `None` otherwise.
    Written(Option<bool>),
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &Time) -> Condition {
    kthena_api::conditions::condition(type_, status, reason, message.to_owned(), None, now.clone())
}

/// The booster's status after a reconcile, as Go leaves it: `Initialized=True`
/// (`ModelCreating`, "ModelBooster initialized") when there were no conditions;
/// `Active=False` (`ModelProcessing`, "ModelBooster not ready yet"); on failure
/// `Failed=True` (`ModelAbnormal`, the error); `Active=True` (`ModelAvailable`,
/// "ModelBooster is ready") once the one ModelServing is available. `Failed` is never
/// cleared (as Go). `observedGeneration` = the booster's generation.
#[must_use]
pub fn status(booster: &ModelBooster, outcome: &Outcome, now: &Time) -> ModelBoosterStatus {
    let mut conditions = booster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if conditions.is_empty() {
        let init = condition(
            INITIALIZED,
            true,
            "ModelCreating",
            "ModelBooster initialized",
            now,
        );
        set_status_condition(&mut conditions, init);
    }
    let active = match outcome {
        Outcome::Written(Some(true)) => {
            condition(ACTIVE, true, "ModelAvailable", "ModelBooster is ready", now)
        }
        _ => condition(
            ACTIVE,
            false,
            "ModelProcessing",
            "ModelBooster not ready yet",
            now,
        ),
    };
    set_status_condition(&mut conditions, active);
    if let Outcome::Failed(message) = outcome {
        set_status_condition(
            &mut conditions,
            condition(FAILED, true, "ModelAbnormal", message, now),
        );
    }
    ModelBoosterStatus {
        conditions,
        observed_generation: booster.metadata.generation,
    }
}

#[cfg(test)]
mod tests;
