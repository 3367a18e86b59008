//! What the ModelBooster controller does, as pure functions of the booster and what exists
//! (Go `controller/model_booster_controller.go`, `model_serving_handler.go`,
//! `model_route_handler.go`, `condition.go`): which children to write, which to delete, and
//! the booster's new status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kthena_api::workload::ModelBoosterStatus;
use kthena_api::{ModelBooster, ModelRoute, ModelServer, ModelServing};
use kube::ResourceExt as _;

use super::{Images, REVISION_LABEL, model_route, model_server, model_serving};
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

/// Go's `meta.SetStatusCondition`: replaces the condition of the same type, keeping its
/// `lastTransitionTime` unless the status changes; appends a new type.
fn set(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(cur) => {
            let time = cur.last_transition_time.clone();
            let same = cur.status == new.status;
            *cur = new;
            if same {
                cur.last_transition_time = time;
            }
        }
        None => conditions.push(new),
    }
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &Time) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
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
        set(&mut conditions, init);
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
    set(&mut conditions, active);
    if let Outcome::Failed(message) = outcome {
        set(
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
mod tests {
    use super::*;
    use kthena_api::workload::ModelServingStatus;
    use std::collections::BTreeMap;

    fn time(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap_or_default())
    }

    fn meta(name: &str, rev: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                REVISION_LABEL.to_owned(),
                rev.to_owned(),
            )])),
            ..ObjectMeta::default()
        }
    }

    fn children() -> Children {
        let mut c = Children {
            serving: ModelServing::default(),
            server: ModelServer::default(),
            route: ModelRoute::default(),
        };
        c.serving.metadata = meta("b-be", "r1");
        c.server.metadata = meta("b-be", "s1");
        c.route.metadata = meta("b", "t1");
        c.route.spec.model_name = "m".to_owned();
        c
    }

    #[test]
    fn only_missing_or_outdated_children_are_written() {
        let want = children();
        let none = writes(&want, &Existing::default());
        assert_eq!((none.serving, none.server, none.route), (true, true, true));
        let old = ModelServing {
            metadata: meta("b-old", "r0"),
            ..ModelServing::default()
        };
        let existing = Existing {
            servings: vec![want.serving.clone(), old],
            server: Some(want.server.clone()),
            route: Some(want.route.clone()),
            other_servers: vec!["b-old".to_owned()],
        };
        let w = writes(&want, &existing);
        assert_eq!(
            w,
            Writes {
                delete_servings: vec!["b-old".to_owned()],
                delete_servers: vec!["b-old".to_owned()],
                ..Writes::default()
            }
        );
        let mut renamed = want.route.clone();
        renamed.spec.model_name = "other".to_owned();
        let mut changed = want.server.clone();
        changed.metadata = meta("b-be", "s0");
        let existing = Existing {
            servings: vec![want.serving.clone()],
            server: Some(changed),
            route: Some(renamed),
            other_servers: Vec::new(),
        };
        let w = writes(&want, &existing);
        assert_eq!(
            (w.serving, w.server, w.recreate_route, w.route),
            (false, true, true, true)
        );
    }

    #[test]
    fn conditions_follow_go() {
        let mut b = ModelBooster::default();
        b.metadata.generation = Some(3);
        let st = status(&b, &Outcome::Written(Some(false)), &time(10));
        let summary: Vec<_> = st
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("Initialized", "True", "ModelCreating"),
                ("Active", "False", "ModelProcessing")
            ]
        );
        assert_eq!(st.observed_generation, Some(3));
        b.status = Some(st);
        let st = status(&b, &Outcome::Failed("boom".to_owned()), &time(20));
        assert_eq!(st.conditions.len(), 3);
        assert_eq!(st.conditions[2].message, "boom");
        // Active stays False: its transition time is the first one.
        assert_eq!(st.conditions[1].last_transition_time, time(10));
        b.status = Some(st);
        let st = status(&b, &Outcome::Written(Some(true)), &time(30));
        let active = &st.conditions[1];
        assert_eq!(
            (active.status.as_str(), active.reason.as_str()),
            ("True", "ModelAvailable")
        );
        assert_eq!(active.last_transition_time, time(30));
        assert_eq!(st.conditions[2].status, "True", "Go never clears Failed");
        assert_eq!(st.conditions[0].last_transition_time, time(10));
    }

    #[test]
    fn availability_is_the_available_condition() {
        let mut ms = ModelServing::default();
        assert!(!serving_available(&ms));
        ms.status = Some(ModelServingStatus {
            conditions: vec![condition("Available", true, "AllGroupsReady", "", &time(1))],
            ..ModelServingStatus::default()
        });
        assert!(serving_available(&ms));
    }
}
