//! `ModelBooster`: one model and its backend, from which the controller generates a
//! ModelServing, a ModelServer and a ModelRoute (Go `model_booster_types.go`).

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::networking::ModelMatch;

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
    /// Environment of the engine containers (some names are special: Go Kthena's
    /// `pkg/apis/workload/v1alpha1/model_booster_types.go`).
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
