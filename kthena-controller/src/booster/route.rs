//! The generated `ModelRoute` (Go `convert.BuildModelRoute`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kthena_api::networking::{ModelRouteSpec, Rule, TargetModel};
use kthena_api::{ModelBooster, ModelRoute};
use kube::ResourceExt as _;

use super::{backend_resource_name, booster_owner_ref, child_labels};
use crate::error::Result;
use crate::serving::revision::hash_json;

/// Name of the generated route's only rule (Go's).
pub const RULE_NAME: &str = "default";

/// The ModelRoute of `booster`: name = the booster's name; `modelName` = `spec.name`, else
/// the booster's name; one rule `default` with the booster's `modelMatch` targeting the
/// ModelServer `<booster>-<backend>` (no weight); labels of [`child_labels`] with an empty
/// backend name and the hash of the route's spec as revision; the booster as controller
/// owner.
///
/// # Errors
/// [`crate::Error::Encode`] if the spec cannot be hashed.
pub fn model_route(booster: &ModelBooster) -> Result<ModelRoute> {
    let name = booster.name_any();
    let spec = ModelRouteSpec {
        model_name: booster.spec.name.clone().unwrap_or_else(|| name.clone()),
        rules: vec![Rule {
            name: RULE_NAME.to_owned(),
            model_match: booster.spec.model_match.clone(),
            target_models: vec![TargetModel {
                model_server_name: Some(backend_resource_name(&name, &booster.spec.backend.name)),
                ..TargetModel::default()
            }],
        }],
        ..ModelRouteSpec::default()
    };
    let revision = hash_json(&spec)?;
    Ok(ModelRoute {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: booster.namespace(),
            labels: Some(child_labels(booster, "", &revision)),
            owner_references: Some(vec![booster_owner_ref(booster)]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}
