//! Minimal types of the third-party kinds Kthena reads or writes: Volcano's [`PodGroup`]
//! (`scheduling.volcano.sh/v1beta1`, gang scheduling of a ModelServing's serving groups, Go Kthena
//! `pkg/model-serving-controller/podgroupmanager/manager.go`) and the Gateway API Inference
//! Extension's [`InferencePool`] (`inference.networking.k8s.io/v1`, a router backend, Go Kthena
//! `pkg/kthena-router/controller/inferencepool_controller.go`).
//!
//! Only the fields Kthena uses are typed; their Go modules are the reference for the rest.
//! The generated CRDs ([`thirdparty_crds`]) are for test clusters that lack the real ones: they
//! keep unknown fields under `spec` and `status`, so objects written for the full CRDs are
//! accepted.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Resource name (`cpu`, `memory`, `nvidia.com/gpu`) to quantity, as Go's `v1.ResourceList`.
type ResourceList = BTreeMap<String, Quantity>;

/// Spec of a Volcano `PodGroup`: the gang of pods the scheduler places all at once.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.volcano.sh",
    version = "v1beta1",
    kind = "PodGroup",
    plural = "podgroups",
    shortname = "pg",
    namespaced,
    status = "PodGroupStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "PodGroup is a collection of pods scheduled as a gang (Volcano)."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodGroupSpec {
    /// Minimal number of pods that must be schedulable together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Minimal number of pods per task (`<role>-<roleIndex>` keys in Kthena); older Volcano.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_task_member: Option<BTreeMap<String, i32>>,
    /// Minimal resources (resource name to quantity) the gang needs to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<ResourceList>,
    /// Volcano queue the gang is admitted through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Priority class of the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Network topology constraint (`mode`, `highestTierAllowed`), kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub network_topology: Option<serde_json::Value>,
    /// Sub-groups (one per role in Kthena), for Volcano releases that support them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_group_policy: Vec<SubGroupPolicy>,
}

/// One `PodGroup` sub-group: pods selected by labels, grouped by `matchLabelKeys`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SubGroupPolicy {
    /// Sub-group name (the role name in Kthena).
    pub name: String,
    /// Pods of the sub-group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Label keys whose values split the selected pods into sub-groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_label_keys: Vec<String>,
    /// Pods per sub-group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_size: Option<i32>,
    /// Minimal number of complete sub-groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sub_groups: Option<i32>,
    /// Network topology constraint of each sub-group, kept as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub network_topology: Option<serde_json::Value>,
}

/// Status of a `PodGroup`, written by Volcano's scheduler.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PodGroupStatus {
    /// `Pending`, `Running`, `Unknown`, `Inqueue` or `Completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Number of running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Number of succeeded pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Number of failed pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
}

/// Spec of a Gateway API Inference Extension `InferencePool`: model-server pods selected by
/// labels, served on `targetPorts`, with an endpoint picker.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    plural = "inferencepools",
    namespaced,
    status = "InferencePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "InferencePool is a set of model-server pods behind one endpoint picker (Gateway API Inference Extension)."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct InferencePoolSpec {
    /// The pods of the pool, by label (only `matchLabels` in `v1`).
    pub selector: InferencePoolSelector,
    /// Ports the pods serve on; Kthena uses the first (1 to 8 entries).
    #[schemars(length(min = 1, max = 8))]
    pub target_ports: Vec<Port>,
    /// The endpoint-picker extension; Kthena schedules itself and does not call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub endpoint_picker_ref: Option<serde_json::Value>,
}

/// Label selector of an `InferencePool`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSelector {
    /// Labels a pod must carry, all of them.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A port number (1 to 65535).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Port {
    /// The port.
    #[schemars(range(min = 1, max = 65535))]
    pub number: i32,
}

/// Status of an `InferencePool`: per-parent conditions, written by Gateway implementations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct InferencePoolStatus {
    /// One entry per parent Gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<InferencePoolParentStatus>,
}

/// Status of an `InferencePool` for one parent Gateway.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct InferencePoolParentStatus {
    /// The parent, kept as written (`group`, `kind`, `namespace`, `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::preserve_unknown_fields")]
    pub parent_ref: Option<serde_json::Value>,
    /// `Accepted`, `ResolvedRefs`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The CustomResourceDefinitions of [`PodGroup`] and [`InferencePool`], for clusters (test
/// control planes) that do not have Volcano or the Inference Extension installed.
///
/// ```
/// let crds = kthena_api::thirdparty::thirdparty_crds();
/// assert_eq!(crds[0].metadata.name.as_deref(), Some("podgroups.scheduling.volcano.sh"));
/// assert_eq!(crds[1].metadata.name.as_deref(), Some("inferencepools.inference.networking.k8s.io"));
/// ```
#[must_use]
pub fn thirdparty_crds() -> Vec<CustomResourceDefinition> {
    vec![crate::crd::tidy(PodGroup::crd()), inference_pool_crd()]
}

/// The CustomResourceDefinition of [`InferencePool`], with the `api-approved.kubernetes.io`
/// annotation the API server requires of a `*.k8s.io` group (without it the CRD is
/// refused).
#[must_use]
pub fn inference_pool_crd() -> CustomResourceDefinition {
    let mut pool = InferencePool::crd();
    pool.metadata.annotations = Some(BTreeMap::from([(
        "api-approved.kubernetes.io".to_owned(),
        API_APPROVED.to_owned(),
    )]));
    crate::crd::tidy(pool)
}

/// [`inference_pool_crd`] as a file: `(file name, YAML text)`, named as controller-gen names
/// it (`inference.networking.k8s.io_inferencepools.yaml`). This is the file under
/// `deploy/gateway-api/` (written by `cargo run -p kthena-api --example crds --
/// charts/kthena/crds deploy/gateway-api`).
///
/// # Errors
/// [`crate::Error::SerializeYaml`] if the CRD cannot be rendered (not expected).
pub fn inference_pool_crd_file() -> crate::Result<(String, String)> {
    let crd = inference_pool_crd();
    let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
    let text = serde_saphyr::to_string(&crd).map_err(|source| crate::Error::SerializeYaml {
        source: Box::new(source),
    })?;
    Ok((name, text))
}

/// The `api-approved.kubernetes.io` annotation of the `InferencePool` CRD (the Inference
/// Extension project, whose API review approved the group).
const API_APPROVED: &str = "https://github.com/kubernetes-sigs/gateway-api-inference-extension";
