//! `AutoscalingPolicy`: metrics, behaviour and a homogeneous, heterogeneous or disaggregated
//! target (Go `autoscaling_policy_types.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::GoDuration;

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
    /// Scale to zero of targets with `minReplicas: 0`. Not in Go Kthena v1.0.0, whose
    /// autoscaler never goes below one replica (`pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go`);
    /// the one field added to Go's `behavior`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero: Option<ScaleToZeroPolicy>,
}

/// When a target whose `minReplicas` is 0 goes to zero replicas: after every router has
/// reported its ModelServers idle for `idleWindow`, with no request held or in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZeroPolicy {
    /// How long every ModelServer serving the target must have been idle (no request held,
    /// in flight or ended within it) before the target goes to 0, within [0, 24h]; the
    /// mutating webhook writes `5m` when some target of the policy has `minReplicas: 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_window: Option<GoDuration>,
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
    /// Prometheus server URL (non-empty URI): `http://` or `https://`.
    #[serde(rename = "serverURL")]
    #[schemars(length(min = 1), url)]
    pub server_url: String,
    /// Instant query returning a scalar or a one-element vector (non-empty).
    #[schemars(length(min = 1))]
    pub query: String,
    /// Credentials sent with every query. Go Kthena v1.0.0 has `auth` as an empty struct
    /// reserved for later (`pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go`); its
    /// fields here are the Prometheus Operator's (`SafeAuthorization`, `BasicAuth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<PrometheusAuth>,
    /// How an `https://` server is verified (the Prometheus Operator's `SafeTLSConfig`
    /// fields); without it, against the system's root certificates. Not in Go Kthena.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_config: Option<PrometheusTlsConfig>,
}

/// Prometheus authentication: at most one of `authorization` and `basicAuth`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusAuth {
    /// An `Authorization: <type> <credentials>` header (the Prometheus Operator's
    /// `SafeAuthorization`), e.g. a bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<PrometheusAuthorization>,
    /// HTTP basic authentication (the Prometheus Operator's `BasicAuth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<PrometheusBasicAuth>,
}

/// An `Authorization` header from a Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusAuthorization {
    /// The scheme, `Bearer` when unset; `Basic` is refused (use `basicAuth`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The Secret key (in the policy's namespace) holding the credentials, e.g. the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<KeySelector>,
}

/// A user name and a password, each from a Secret key in the policy's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusBasicAuth {
    /// The Secret key holding the user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<KeySelector>,
    /// The Secret key holding the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<KeySelector>,
}

/// TLS settings of an `https://` Prometheus server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusTlsConfig {
    /// The CA certificates (PEM) the server's certificate must chain to, instead of the
    /// system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretOrConfigMap>,
    /// The name the server's certificate must be valid for (and the SNI sent), instead of
    /// the URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// Accept any server certificate (handshake signatures are still checked). For tests
    /// only: anyone on the path can read the credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
}

/// A key of a Secret or of a ConfigMap in the policy's namespace: exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretOrConfigMap {
    /// A Secret's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<KeySelector>,
    /// A ConfigMap's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<KeySelector>,
}

/// One key of a Secret or ConfigMap in the policy's namespace (the fields of Kubernetes'
/// `SecretKeySelector`); both non-empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct KeySelector {
    /// The object's name.
    #[serde(default)]
    #[schemars(transform = crate::common::no_default)]
    pub name: String,
    /// The key in its `data`.
    #[serde(default)]
    #[schemars(transform = crate::common::no_default)]
    pub key: String,
}

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
    #[schemars(extend("minProperties" = 1, "maxProperties" = 2))]
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
    /// Replicas recommended by the last decision; absent until a decision was made (a `0`
    /// written before any decision would read as "scale to zero").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
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
