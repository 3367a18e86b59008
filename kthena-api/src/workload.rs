//! Kinds of the `workload.serving.volcano.sh/v1alpha1` group: [`ModelServing`],
//! [`ModelBooster`] and [`AutoscalingPolicy`].
//!
//! Field names, enums and defaults follow Go Kthena's `pkg/apis/workload/v1alpha1/*_types.go`
//! and the CRDs generated from them (the v1.0 AutoscalingPolicy shape with
//! `homogeneousTarget` / `heterogeneousTarget` / `disaggregatedTarget`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, ObjectReference, PodTemplateSpec, ResourceRequirements,
    Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::GoDuration;
use crate::networking::ModelMatch;

/// API group of the workload kinds.
pub const GROUP: &str = "workload.serving.volcano.sh";
/// `apiVersion` of the workload kinds.
pub const API_VERSION: &str = "workload.serving.volcano.sh/v1alpha1";

// ---------------------------------------------------------------------------------------------
// ModelServing
// ---------------------------------------------------------------------------------------------

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
    /// Groups that may be unavailable during the update: an int ≥ 0 or a percent of
    /// `replicas` rounded down; must not resolve to 0 (default 1).
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

// ---------------------------------------------------------------------------------------------
// ModelBooster
// ---------------------------------------------------------------------------------------------

/// Spec of a `ModelBooster`: one model and its backend, from which the controller generates a
/// `ModelServing`, a `ModelServer` and a `ModelRoute`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "workload.serving.volcano.sh",
    version = "v1alpha1",
    kind = "ModelBooster",
    plural = "modelboosters",
    namespaced,
    status = "ModelBoosterStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ModelBooster is the Schema for the models API.",
    printcolumn = r#"{"name": "Active", "type": "string", "description": "Whether the model booster is active", "jsonPath": ".status.conditions[?(@.type=='Active')].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ModelBoosterSpec {
    /// Request model name (at most 64 characters, DNS label); defaults to `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: Option<String>,
    /// Owner (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The backend serving the model.
    pub backend: ModelBackend,
    /// Match conditions copied into the generated `ModelRoute` rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_match: Option<ModelMatch>,
}

/// Backend of a `ModelBooster`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelBackend {
    /// Backend name (DNS label).
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// Backend type.
    #[serde(rename = "type")]
    pub type_: ModelBackendType,
    /// Where the weights come from: `hf://`, `s3://`, `obs://`, `pvc://` or `ms://`.
    #[serde(rename = "modelURI")]
    #[schemars(regex(pattern = r"^(hf://|s3://|obs://|pvc://|ms://).+"))]
    pub model_uri: String,
    /// Where weights are cached: `hostpath://` or `pvc://` (empty: an emptyDir).
    #[serde(default, rename = "cacheURI", skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(hostpath://|pvc://).+"))]
    pub cache_uri: Option<String>,
    /// Environment sources of the engine containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    /// Environment of the engine containers (some names are special, see the spec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// ServingGroup replicas, 0..=1_000_000.
    #[schemars(range(min = 0, max = 1_000_000))]
    pub replicas: i32,
    /// Workers, 1 to 1000.
    #[schemars(length(min = 1, max = 1000))]
    pub workers: Vec<ModelWorker>,
    /// Scheduler of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Runtime class of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
}

/// Backend type of a `ModelBooster` (the CRD enum; Go also defines SGLang and MindIE
/// constants that the CRD rejects).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ModelBackendType {
    /// vLLM, one `server` worker.
    #[default]
    #[serde(rename = "vLLM")]
    VLlm,
    /// vLLM with separate `prefill` and `decode` workers.
    #[serde(rename = "vLLMDisaggregated")]
    VLlmDisaggregated,
}

/// A worker of a `ModelBooster` backend.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelWorker {
    /// Worker type (default `server`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "server"))]
    pub type_: Option<ModelWorkerType>,
    /// Engine image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Role replicas, 0..=1_000_000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000))]
    pub replicas: Option<i32>,
    /// Pods per role replica, 0..=1_000_000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000))]
    pub pods: Option<i32>,
    /// Resources of the engine container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Affinity of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations of the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// vLLM engine arguments as a JSON object (`{"port": 8000, "tensor-parallel-size": 2}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub config: Option<serde_json::Value>,
}

/// Type of a [`ModelWorker`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelWorkerType {
    /// Aggregated serving (default).
    #[default]
    Server,
    /// Prefill.
    Prefill,
    /// Decode.
    Decode,
    /// MindIE controller.
    Controller,
    /// MindIE coordinator.
    Coordinator,
}

/// Status of a `ModelBooster`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelBoosterStatus {
    /// `Initialized`, `Active`, `Failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Generation last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// AutoscalingPolicy
// ---------------------------------------------------------------------------------------------

/// Spec of an `AutoscalingPolicy`: metrics with target values, scaling behaviour, and exactly
/// one of a homogeneous, heterogeneous or disaggregated target.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "workload.serving.volcano.sh",
    version = "v1alpha1",
    kind = "AutoscalingPolicy",
    plural = "autoscalingpolicies",
    namespaced,
    status = "AutoscalingPolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "AutoscalingPolicy is the Schema for the autoscalingpolicies API.",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingPolicySpec {
    /// Dead band around the target in percent, 0..=100 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    #[schemars(extend("default" = 10))]
    pub tolerance_percent: Option<i32>,
    /// Metrics and their per-replica target values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<AutoscalingPolicyMetric>,
    /// Scale-up and scale-down behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<AutoscalingPolicyBehavior>,
    /// One target scaled between min and max replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homogeneous_target: Option<HomogeneousTarget>,
    /// Several targets scaled by cost-capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heterogeneous_target: Option<HeterogeneousTarget>,
    /// Roles of one prefill/decode `ModelServing`, with an optional ratio constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregated_target: Option<DisaggregatedTarget>,
}

/// A metric and its target value per replica.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingPolicyMetric {
    /// Metric name (non-empty); a key of the target's `metricSources` or a pod metric family.
    pub name: String,
    /// Target value per replica (a Kubernetes quantity, must be > 0).
    pub target_value: Quantity,
}

/// Scaling behaviour.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingPolicyBehavior {
    /// Scale-up behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up: Option<ScaleUpBehavior>,
    /// Scale-down behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<StablePolicy>,
}

/// Scale-up behaviour: a stable policy and a panic policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleUpBehavior {
    /// Stable-mode limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_policy: Option<StablePolicy>,
    /// Panic-mode limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panic_policy: Option<PanicPolicy>,
}

/// Per-period scaling limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StablePolicy {
    /// Replicas that may change per period, ≥ 0 (CRD default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub instances: Option<i32>,
    /// Percent of current replicas that may change per period, 0..=1000 (CRD default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000), extend("default" = 100))]
    pub percent: Option<i32>,
    /// Period of the limits (CRD default `15s`), within [0, 30m].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "15s"))]
    pub period: Option<GoDuration>,
    /// `Or` (the larger limit, default) or `And` (the smaller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Or"))]
    pub select_policy: Option<SelectPolicy>,
    /// Recommendations are smoothed over this window, within [0, 30m].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stabilization_window: Option<GoDuration>,
}

/// How the `instances` and `percent` limits combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SelectPolicy {
    /// The larger of the two limits (default).
    #[default]
    Or,
    /// The smaller of the two limits.
    And,
}

/// Panic-mode scale-up limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PanicPolicy {
    /// Percent of current replicas added per period, 0..=1000 (CRD default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000), extend("default" = 1000))]
    pub percent: Option<i32>,
    /// Period of the limit (required), within [0, 30m].
    pub period: GoDuration,
    /// Load over target, in percent, that enters panic mode, 110..=1000 (CRD default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 110, max = 1000))]
    #[schemars(extend("default" = 200))]
    pub panic_threshold_percent: Option<i32>,
    /// How long panic mode lasts (CRD default `60s`), within [0, 30m].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "60s"))]
    pub panic_mode_hold: Option<GoDuration>,
}

/// A scaled object and where its metrics come from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// The scaled object; `kind` must be empty or `ModelServing`, `name` non-empty.
    pub target_ref: ObjectReference,
    /// Metric name → source.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metric_sources: BTreeMap<String, MetricSource>,
}

/// Where a metric comes from: exactly one of `pod` and `prometheus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricSource {
    /// Scrape the target's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodMetricSource>,
    /// Run a PromQL instant query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusMetricSource>,
}

/// Pod scrape source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetricSource {
    /// Prometheus family name (defaults to the metric key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Path of the metrics endpoint (default `/metrics`, must start with `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^/"), extend("default" = "/metrics"))]
    pub uri: Option<String>,
    /// Port of the metrics endpoint, 1..=65535 (default 8100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535), extend("default" = 8100))]
    pub port: Option<i32>,
    /// Which pods are scraped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// PromQL source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusMetricSource {
    /// Prometheus server URL (non-empty URI).
    #[serde(rename = "serverURL")]
    #[schemars(length(min = 1), url)]
    pub server_url: String,
    /// Instant query returning a scalar or a one-element vector (non-empty).
    #[schemars(length(min = 1))]
    pub query: String,
    /// Reserved (empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<PrometheusAuth>,
}

/// Reserved Prometheus authentication settings (empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PrometheusAuth {}

/// A single scaled target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HomogeneousTarget {
    /// The scaled object.
    #[serde(default)]
    #[schemars(transform = crate::common::no_default)]
    pub target: Target,
    /// Lower bound, 0..=1_000_000.
    #[schemars(range(min = 0, max = 1_000_000))]
    pub min_replicas: i32,
    /// Upper bound, 1..=1_000_000.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_replicas: i32,
}

/// Several targets with costs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeterogeneousTarget {
    /// Targets (at least one).
    #[serde(default)]
    #[schemars(length(min = 1), transform = crate::common::no_default)]
    pub params: Vec<HeterogeneousTargetParam>,
    /// Cost expansion rate in percent, ≥ 0 (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[schemars(extend("default" = 200))]
    pub cost_expansion_rate_percent: Option<i32>,
}

/// One target of a [`HeterogeneousTarget`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeterogeneousTargetParam {
    /// The scaled object.
    #[serde(default)]
    #[schemars(transform = crate::common::no_default)]
    pub target: Target,
    /// Cost of one replica, ≥ 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cost: Option<i32>,
    /// Lower bound, 0..=1_000_000.
    #[schemars(range(min = 0, max = 1_000_000))]
    pub min_replicas: i32,
    /// Upper bound, 1..=1_000_000.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_replicas: i32,
}

/// Roles of one prefill/decode `ModelServing`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisaggregatedTarget {
    /// The `ModelServing`.
    pub target_ref: ObjectReference,
    /// Role name → scaling parameters (1 or 2 roles).
    pub roles: BTreeMap<String, RoleScalingParam>,
    /// Bounds on `replicas[numerator] / replicas[denominator]`; needs two roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_constraint: Option<RoleRatioConstraint>,
}

/// Scaling parameters of one role.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleScalingParam {
    /// Lower bound, 0..=1_000_000.
    #[schemars(range(min = 0, max = 1_000_000))]
    pub min_replicas: i32,
    /// Upper bound, 1..=1_000_000.
    #[schemars(range(min = 1, max = 1_000_000))]
    pub max_replicas: i32,
    /// Role metrics (overrides `spec.metrics`), at least one when set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<AutoscalingPolicyMetric>,
    /// Metric name → source for this role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metric_sources: BTreeMap<String, MetricSource>,
}

/// Ratio bounds between two roles: `minRatio ≤ replicas[num] / replicas[den] ≤ maxRatio`
/// whenever the denominator is not zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleRatioConstraint {
    /// Numerator role.
    pub numerator_role: String,
    /// Denominator role (must differ from the numerator).
    pub denominator_role: String,
    /// Lower bound (quantity, ≥ 0).
    pub min_ratio: Quantity,
    /// Upper bound (quantity, > 0, ≥ `minRatio`).
    pub max_ratio: Quantity,
}

/// Status of an `AutoscalingPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingPolicyStatus {
    /// Generation last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `TargetFound`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Status of a homogeneous target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homogeneous_status: Option<TargetScalingStatus>,
    /// Status of each heterogeneous target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heterogeneous_status: Vec<TargetScalingStatus>,
    /// Status of a disaggregated target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregated_status: Option<DisaggregatedStatus>,
}

/// Scaling state of one target or role.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetScalingStatus {
    /// Target or role name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Replicas observed.
    pub current_replicas: i32,
    /// Replicas recommended.
    pub desired_replicas: i32,
    /// `Stable` or `Panic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Last time the replicas changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
}

/// Status of a disaggregated target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisaggregatedStatus {
    /// Per-role state.
    #[serde(default)]
    #[schemars(transform = crate::common::no_default)]
    pub roles: Vec<TargetScalingStatus>,
    /// Current ratio between the constrained roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_status: Option<RatioStatus>,
    /// Whether the last recommendation was adjusted to satisfy the ratio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_adjusted: Option<bool>,
}

/// Current ratio between two roles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RatioStatus {
    /// Numerator role.
    pub numerator_role: String,
    /// Denominator role.
    pub denominator_role: String,
    /// Ratio as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_ratio: Option<String>,
}
