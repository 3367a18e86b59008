//! `ModelServing`: ServingGroups of roles, rollout and recovery, gang scheduling and network
//! topology (Go `model_serving_types.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of a `ModelServing`: `replicas` identical ServingGroups, each made of up to four roles
/// (e.g. prefill and decode), each role replica one entry pod plus `workerReplicas` workers.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "workload.serving.volcano.sh",
    version = "v1alpha1",
    kind = "ModelServing",
    plural = "modelservings",
    namespaced,
    status = "ModelServingStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ModelServing is the Schema for the LLM Serving API",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn = r#"{"name": "Replicas", "type": "integer", "description": "Total number of serving groups", "jsonPath": ".status.replicas"}"#,
    printcolumn = r#"{"name": "Available", "type": "integer", "description": "Number of serving groups that are ready", "jsonPath": ".status.availableReplicas"}"#,
    printcolumn = r#"{"name": "Updated", "type": "integer", "description": "Number of serving groups updated to the latest revision", "jsonPath": ".status.updatedReplicas"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ModelServingSpec {
    /// Number of ServingGroups (default 1, must be ≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,
    /// Scheduler of the pods (default `volcano`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "volcano"))]
    pub scheduler_name: Option<String>,
    /// Plugin chain applied to generated pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginSpec>,
    /// Template of one ServingGroup.
    pub template: ServingGroup,
    /// How template changes are rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// What is torn down when a pod is lost (default `RoleRecreate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "RoleRecreate"))]
    pub recovery_policy: Option<RecoveryPolicy>,
}

/// A plugin applied to the pods of a `ModelServing`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginSpec {
    /// Registered plugin name.
    pub name: String,
    /// Plugin kind (only `BuiltIn`).
    #[serde(default, rename = "type")]
    pub type_: PluginType,
    /// Free-form plugin configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub config: Option<serde_json::Value>,
    /// Which pods the plugin applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<PluginScope>,
}

/// Kind of a [`PluginSpec`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PluginType {
    /// A plugin compiled into the controller.
    #[default]
    BuiltIn,
}

/// Pods a plugin applies to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginScope {
    /// Role names (empty: all roles).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// `All`, `Entry` or `Worker` (empty: `All`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// Rollout strategy of a `ModelServing`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Unit of rolling (default `ServingGroupRollingUpdate`).
    #[serde(default, rename = "type")]
    pub type_: RolloutStrategyType,
    /// Group-level settings; only valid with `ServingGroupRollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update_configuration: Option<RollingUpdateConfiguration>,
}

/// Unit of a rolling update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStrategyType {
    /// Replace whole ServingGroups (default).
    #[default]
    ServingGroupRollingUpdate,
    /// Replace role replicas one role at a time.
    RoleRollingUpdate,
}

/// Rolling update limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateConfiguration {
    /// Groups that may be unavailable during the update: an int ≥ 1 or a percent of
    /// `replicas` rounded down, at least 1 (not 0 or `0%`; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub max_unavailable: Option<IntOrString>,
    /// Ordinals `[0, partition)` are not updated: an int or a percent rounded up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
}

/// What the controller tears down when a pod is lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RecoveryPolicy {
    /// Recreate the whole ServingGroup.
    ServingGroupRecreate,
    /// Recreate the role replica (default).
    #[default]
    RoleRecreate,
    /// Recreate only missing pods.
    None,
}

/// Template of one ServingGroup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServingGroup {
    /// Seconds an errored pod may stay before it is deleted (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub restart_grace_period_seconds: Option<i64>,
    /// Gang scheduling policy; once set it cannot be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_policy: Option<GangPolicy>,
    /// Volcano network topology constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopology>,
    /// Roles, 1 to 4, with unique names.
    #[schemars(length(min = 1, max = 4))]
    pub roles: Vec<Role>,
}

/// Gang scheduling policy of a ServingGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GangPolicy {
    /// Role name → minimum role replicas scheduled together (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_role_replicas: Option<BTreeMap<String, i32>>,
}

/// Volcano network topology constraints of a ServingGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopology {
    /// Constraint for the whole group (PodGroup `networkTopology`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_policy: Option<NetworkTopologySpec>,
    /// Constraint for each role (PodGroup `subGroupPolicy[].networkTopology`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_policy: Option<NetworkTopologySpec>,
}

/// Volcano `NetworkTopologySpec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopologySpec {
    /// `hard` (default) or `soft`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "hard"))]
    pub mode: Option<NetworkTopologyMode>,
    /// Highest tier allowed (≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub highest_tier_allowed: Option<i64>,
    /// Name of the highest tier allowed (at most 253 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub highest_tier_name: Option<String>,
}

/// Mode of a network topology constraint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkTopologyMode {
    /// Must be satisfied (default).
    #[default]
    Hard,
    /// Best effort.
    Soft,
}

/// A role of a ServingGroup (e.g. `prefill`, `decode`, `leader`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Role {
    /// Role name: at most 12 characters, a DNS-1035 label.
    #[schemars(
        length(max = 12),
        regex(pattern = r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")
    )]
    pub name: String,
    /// Role replicas per ServingGroup (default 1, must be ≥ 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,
    /// Pod template of the one entry pod of each role replica.
    pub entry_template: PodTemplateSpec,
    /// Worker pods per role replica (≥ 0).
    pub worker_replicas: i32,
    /// Pod template of the workers; required when `workerReplicas > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_template: Option<PodTemplateSpec>,
    /// Role replicas that may be unavailable during a `RoleRollingUpdate` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub max_unavailable: Option<IntOrString>,
    /// Role ordinals `[0, partition)` not updated; only with `RoleRollingUpdate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
}

/// Status of a `ModelServing`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelServingStatus {
    /// Generation last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// ServingGroups that exist, including deleting ones.
    #[serde(default)]
    #[schemars(transform = crate::common::no_default)]
    pub replicas: i32,
    /// ServingGroups at the current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// ServingGroups at the update revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// ServingGroups that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Current template revision hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// Target template revision hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// `Available`, `Progressing`, `UpdateInProgress`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Label selector of the pods (scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}
