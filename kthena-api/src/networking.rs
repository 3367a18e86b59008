//! Kinds of the `networking.serving.volcano.sh/v1alpha1` group: [`ModelRoute`],
//! [`ModelServer`] and [`ExternalModelProvider`].
//!
//! Field names, enums and defaults follow Go Kthena's
//! `pkg/apis/networking/v1alpha1/*_types.go` and the CRDs generated from them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretKeySelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Errors, FieldError, GoDuration, idx, key};

/// API group of the networking kinds.
pub const GROUP: &str = "networking.serving.volcano.sh";
/// `apiVersion` of the networking kinds.
pub const API_VERSION: &str = "networking.serving.volcano.sh/v1alpha1";

/// Default [`TargetModel::weight`] (percent of traffic, CRD default).
pub const DEFAULT_WEIGHT: u32 = 100;

// ---------------------------------------------------------------------------------------------
// ModelRoute
// ---------------------------------------------------------------------------------------------

/// Spec of a `ModelRoute`: which requests (by their OpenAI `model` field, headers, URI) go to
/// which `ModelServer`s or `ExternalModelProvider`s, with weights and an optional token rate
/// limit.
///
/// CEL rule on the spec: `modelName` and `loraAdapters` cannot both be empty.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "networking.serving.volcano.sh",
    version = "v1alpha1",
    kind = "ModelRoute",
    plural = "modelroutes",
    namespaced,
    status = "ModelRouteStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ModelRoute is the Schema for the Modelroutes API.",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ModelRouteSpec {
    /// The `model` of the request this route serves: a base model, LoRA adapter or virtual
    /// name. May be empty when `loraAdapters` is set. Immutable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model_name: String,
    /// LoRA adapter names this route serves (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub lora_adapters: Vec<String>,
    /// Gateways this route attaches to. Empty: all Gateways in the route's namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_refs: Vec<ParentReference>,
    /// Ordered rules (at most 16); the first matching rule wins.
    #[schemars(length(max = 16))]
    pub rules: Vec<Rule>,
    /// Token rate limit; no limit when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
}

/// Status of a `ModelRoute` (empty: Go Kthena writes no status).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelRouteStatus {}

/// A Gateway API `ParentReference` (`gateway.networking.k8s.io/v1`), the parent a route
/// attaches to. Own minimal type: the `gateway-api` crate pins another `k8s-openapi` release.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// Group of the referent; unset means `gateway.networking.k8s.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "gateway.networking.k8s.io"))]
    pub group: Option<String>,
    /// Kind of the referent; unset means `Gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Gateway"))]
    pub kind: Option<String>,
    /// Namespace of the referent; unset means the route's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the referent (required).
    pub name: String,
    /// Listener name within the Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    /// Port of the Gateway listener (1..=65535).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

/// One routing rule: optional match conditions and weighted targets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Name of the rule (informational).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Match conditions (ANDed); unset matches every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_match: Option<ModelMatch>,
    /// Weighted targets, 1 to 16 of them.
    #[schemars(length(min = 1, max = 16))]
    pub target_models: Vec<TargetModel>,
}

/// Match conditions of a [`Rule`]; all present conditions must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelMatch {
    /// Header name → condition on the header value (a missing header counts as `""`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, StringMatch>,
    /// Condition on the request URL path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<StringMatch>,
    /// Conditions on the request body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<BodyMatch>,
}

/// A string condition. At most one of the fields should be set; when several are, the
/// precedence is exact > prefix > regex (Go Kthena). None set matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    /// The value must equal this string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// The value must start with this string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The value must contain a match of this RE2 regular expression (unanchored search).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// Conditions on the request body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BodyMatch {
    /// The request `model` must equal this string exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A weighted target of a rule: exactly one of `modelServerName` and
/// `externalModelProviderName`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetModel {
    /// Name of a `ModelServer` in the route's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_server_name: Option<String>,
    /// Name of an `ExternalModelProvider` in the route's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_model_provider_name: Option<String>,
    /// Relative weight 0..=100; defaults to 100 ([`DEFAULT_WEIGHT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    #[schemars(extend("default" = 100))]
    pub weight: Option<u32>,
}

/// Token rate limit of a route.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// Maximum input (prompt) tokens per `unit`, at least 1; unset: no input limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub input_tokens_per_unit: Option<u32>,
    /// Maximum output tokens per `unit`, at least 1; unset: no output limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub output_tokens_per_unit: Option<u32>,
    /// Time unit of the limits (default `second`).
    #[serde(default)]
    pub unit: RateLimitUnit,
    /// Global (Redis-backed) limiting; unset: limits are per router instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global: Option<GlobalRateLimit>,
}

/// Unit of a [`RateLimit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RateLimitUnit {
    /// Per second (default).
    #[default]
    Second,
    /// Per minute.
    Minute,
    /// Per hour.
    Hour,
    /// Per day.
    Day,
    /// Per month.
    Month,
}

impl RateLimitUnit {
    /// Length of the unit in seconds (a month counts 30 days, a day 24 hours).
    pub fn seconds(self) -> u64 {
        match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3600,
            Self::Day => 86_400,
            Self::Month => 30 * 86_400,
        }
    }
}

/// Global rate limiting configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GlobalRateLimit {
    /// Redis backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisConfig>,
}

/// Redis connection for global rate limiting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisConfig {
    /// `host:port` of the Redis server.
    pub address: String,
}

// === impl ModelRoute ===

impl ModelRoute {
    /// Applies the CRD defaults: every target without `weight` gets [`DEFAULT_WEIGHT`]
    /// (`rateLimit.unit` already defaults to `second` when decoded).
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        for rule in &mut self.spec.rules {
            for t in &mut rule.target_models {
                t.weight.get_or_insert(DEFAULT_WEIGHT);
            }
        }
        self
    }

    /// Checks the CRD schema limits, the CEL rules and the router's admission webhook rules
    /// (`pkg/kthena-router/webhook/validator.go`), returning every problem at once.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        if s.model_name.is_empty() && s.lora_adapters.is_empty() {
            e.push("spec", "ModelName and LoraAdapters cannot both be empty");
        }
        if s.lora_adapters.len() > 10 {
            e.push("spec.loraAdapters", "must have at most 10 items");
        }
        for (i, lora) in s.lora_adapters.iter().enumerate() {
            if lora.is_empty() {
                e.push(
                    idx("spec.loraAdapters", i),
                    "lora adapter name cannot be an empty string",
                );
            }
        }
        for (i, p) in s.parent_refs.iter().enumerate() {
            let path = idx("spec.parentRefs", i);
            if p.name.is_empty() {
                e.push(format!("{path}.name"), "must not be empty");
            }
            e.range_i64(&format!("{path}.port"), p.port.map(i64::from), 1, 65535);
        }
        if s.rules.len() > 16 {
            e.push("spec.rules", "must have at most 16 items");
        }
        let is_lora = !s.lora_adapters.is_empty();
        for (i, rule) in s.rules.iter().enumerate() {
            let rpath = idx("spec.rules", i);
            validate_rule(&mut e, &rpath, rule, is_lora);
        }
        if let Some(rl) = &s.rate_limit {
            if rl.input_tokens_per_unit == Some(0) {
                e.push("spec.rateLimit.inputTokensPerUnit", "must be at least 1");
            }
            if rl.output_tokens_per_unit == Some(0) {
                e.push("spec.rateLimit.outputTokensPerUnit", "must be at least 1");
            }
        }
        e.finish()
    }

    /// Checks the transition rules (CEL rules using `oldSelf`) against the stored object:
    /// `modelName` is immutable.
    ///
    /// # Errors
    /// One [`FieldError`] per violated rule.
    pub fn validate_update(&self, old: &Self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        if self.spec.model_name != old.spec.model_name {
            e.push("spec.modelName", "modelName is immutable");
        }
        e.finish()
    }
}

fn validate_rule(e: &mut Errors, rpath: &str, rule: &Rule, is_lora: bool) {
    let tpath = format!("{rpath}.targetModels");
    if rule.target_models.is_empty() {
        e.push(&tpath, "must have at least 1 item");
    }
    if rule.target_models.len() > 16 {
        e.push(&tpath, "must have at most 16 items");
    }
    let mut total: u64 = 0;
    for (j, t) in rule.target_models.iter().enumerate() {
        let p = idx(&tpath, j);
        let server = t
            .model_server_name
            .as_deref()
            .is_some_and(|n| !n.is_empty());
        let external = t
            .external_model_provider_name
            .as_deref()
            .is_some_and(|n| !n.is_empty());
        if server == external {
            e.push(
                &p,
                "exactly one of modelServerName or externalModelProviderName must be set",
            );
        }
        if is_lora && external {
            e.push(
                format!("{p}.externalModelProviderName"),
                "LoRA routes cannot target an ExternalModelProvider",
            );
        }
        match t.weight {
            Some(w) => {
                if w > 100 {
                    e.push(format!("{p}.weight"), "must be between 0 and 100");
                }
                total += u64::from(w);
            }
            None => total += u64::from(DEFAULT_WEIGHT),
        }
    }
    if !rule.target_models.is_empty() && total == 0 {
        e.push(&tpath, "the sum of target weights must be greater than 0");
    }
    if let Some(m) = &rule.model_match {
        let mpath = format!("{rpath}.modelMatch");
        for (name, sm) in &m.headers {
            check_regex(e, &key(&format!("{mpath}.headers"), name), sm);
        }
        if let Some(uri) = &m.uri {
            check_regex(e, &format!("{mpath}.uri"), uri);
        }
    }
}

fn check_regex(e: &mut Errors, path: &str, sm: &StringMatch) {
    if let Some(re) = &sm.regex
        && let Err(err) = regex::Regex::new(re)
    {
        let text = err.to_string();
        let last = text.lines().last().unwrap_or("invalid").trim();
        let reason = last.strip_prefix("error: ").unwrap_or(last);
        e.push(
            format!("{path}.regex"),
            format!("invalid regular expression {re:?}: {reason}"),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// ModelServer
// ---------------------------------------------------------------------------------------------

/// Spec of a `ModelServer`: a set of inference-engine pods (selected by labels) serving one
/// model on one port, optionally split into prefill/decode groups.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "networking.serving.volcano.sh",
    version = "v1alpha1",
    kind = "ModelServer",
    plural = "modelservers",
    namespaced,
    status = "ModelServerStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ModelServer is the Schema for the modelservers API.",
    printcolumn = r#"{"name": "Engine", "type": "string", "description": "Inference engine used to serve the model", "jsonPath": ".spec.inferenceEngine"}"#,
    printcolumn = r#"{"name": "Port", "type": "integer", "description": "Model server port", "jsonPath": ".spec.workloadPort.port"}"#,
    printcolumn = r#"{"name": "Protocol", "type": "string", "description": "Model server protocol", "jsonPath": ".spec.workloadPort.protocol"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ModelServerSpec {
    /// The model the engine really serves (at most 256 characters). When set and the request
    /// is not a LoRA request, the router rewrites the request `model` to this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub model: Option<String>,
    /// Inference engine of the pods.
    pub inference_engine: InferenceEngine,
    /// Which pods (in the same namespace) belong to this server.
    pub workload_selector: WorkloadSelector,
    /// Port and protocol of the engine.
    pub workload_port: WorkloadPort,
    /// Timeout and retry settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<TrafficPolicy>,
    /// KV-cache transfer protocol between prefill and decode pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_connector: Option<KvConnector>,
}

/// Status of a `ModelServer` (empty: Go Kthena writes no status).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelServerStatus {}

/// Inference engine of a `ModelServer`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InferenceEngine {
    /// vLLM.
    #[default]
    #[serde(rename = "vLLM")]
    VLlm,
    /// SGLang.
    #[serde(rename = "SGLang")]
    SgLang,
}

impl InferenceEngine {
    /// The wire name (`vLLM` or `SGLang`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VLlm => "vLLM",
            Self::SgLang => "SGLang",
        }
    }
}

/// Pod selection of a `ModelServer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Labels every pod must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Prefill/decode grouping; enables PD-disaggregated routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd_group: Option<PdGroup>,
}

/// Prefill/decode grouping: pods with the same value of `groupKey` form one group; within it,
/// `prefillLabels` pick prefill pods and `decodeLabels` decode pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PdGroup {
    /// Label key whose value identifies a group.
    pub group_key: String,
    /// Labels of prefill pods.
    pub prefill_labels: BTreeMap<String, String>,
    /// Labels of decode pods.
    pub decode_labels: BTreeMap<String, String>,
}

/// Engine port of a `ModelServer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPort {
    /// TCP port 1..=65535 used for inference, metrics, `/v1/models` and tokenize.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// `http` (default) or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "http"))]
    pub protocol: Option<Protocol>,
}

/// Protocol of a [`WorkloadPort`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Plain HTTP (default).
    #[default]
    Http,
    /// HTTPS.
    Https,
}

/// Traffic settings of a `ModelServer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// Bound on connect + send + waiting for response headers (not the body); unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Retry settings (defined by the API; Go Kthena's router does not use them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
}

/// Retry settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Number of attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i32>,
    /// Pause between attempts (default `100ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "100ms"))]
    pub retry_interval: Option<GoDuration>,
}

/// KV connector of a `ModelServer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KvConnector {
    /// Connector type (default `http`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "http"))]
    pub type_: Option<KvConnectorType>,
}

/// KV-cache transfer protocol between prefill and decode pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KvConnectorType {
    /// Plain HTTP: prefill with `max_tokens=1`, then decode (default).
    #[default]
    Http,
    /// LMCache.
    Lmcache,
    /// NIXL.
    Nixl,
    /// Mooncake.
    Mooncake,
}

// === impl ModelServer ===

impl ModelServer {
    /// Applies the CRD defaults: `workloadPort.protocol` `http`, `kvConnector.type` `http`
    /// (when `kvConnector` is present), `trafficPolicy.retry.retryInterval` `100ms` (when
    /// `retry` is present).
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        let s = &mut self.spec;
        s.workload_port.protocol.get_or_insert(Protocol::Http);
        if let Some(kv) = &mut s.kv_connector {
            kv.type_.get_or_insert(KvConnectorType::Http);
        }
        if let Some(retry) = s.traffic_policy.as_mut().and_then(|t| t.retry.as_mut()) {
            retry
                .retry_interval
                .get_or_insert_with(|| GoDuration::new("100ms"));
        }
        self
    }

    /// Checks the CRD schema limits: `model` length, port range, and that the durations
    /// parse (the API server rejects a malformed `metav1.Duration` when decoding).
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        e.max_len("spec.model", s.model.as_deref(), 256);
        e.range_i64(
            "spec.workloadPort.port",
            Some(i64::from(s.workload_port.port)),
            1,
            65535,
        );
        if let Some(tp) = &s.traffic_policy {
            e.duration("spec.trafficPolicy.timeout", tp.timeout.as_ref());
            if let Some(r) = &tp.retry {
                e.duration(
                    "spec.trafficPolicy.retry.retryInterval",
                    r.retry_interval.as_ref(),
                );
            }
        }
        e.finish()
    }
}

// ---------------------------------------------------------------------------------------------
// ExternalModelProvider
// ---------------------------------------------------------------------------------------------

/// Spec of an `ExternalModelProvider`: an OpenAI- or Anthropic-compatible HTTPS endpoint
/// outside the cluster that a `ModelRoute` can target.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "networking.serving.volcano.sh",
    version = "v1alpha1",
    kind = "ExternalModelProvider",
    plural = "externalmodelproviders",
    namespaced,
    status = "ExternalModelProviderStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ExternalModelProvider is the Schema for the externalmodelproviders API."
)]
#[serde(rename_all = "camelCase")]
pub struct ExternalModelProviderSpec {
    /// API flavour (default `OpenAI`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "OpenAI"))]
    pub provider_type: Option<ProviderType>,
    /// Model name sent upstream instead of the request's (at most 256 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub model: Option<String>,
    /// Base URL; must start with `https://`.
    #[serde(rename = "baseURL")]
    #[schemars(length(min = 1), regex(pattern = r"^https://.+"))]
    pub base_url: String,
    /// Skip TLS certificate verification (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub insecure_skip_verify: Option<bool>,
    /// Credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ProviderAuth>,
    /// Static, non-sensitive headers added to every upstream request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// API flavour of an external provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ProviderType {
    /// OpenAI-compatible (default).
    #[default]
    OpenAI,
    /// Anthropic Messages API.
    Anthropic,
}

/// Credentials of an external provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderAuth {
    /// How the secret is sent; default `Bearer` for OpenAI, `APIKey` for Anthropic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<AuthScheme>,
    /// Secret key holding the credential; `optional` must be false or unset.
    pub secret_ref: SecretKeySelector,
}

/// How a provider credential is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AuthScheme {
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// Provider API-key header (`x-api-key` for Anthropic).
    #[serde(rename = "APIKey")]
    ApiKey,
}

/// Status of an `ExternalModelProvider`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalModelProviderStatus {
    /// Generation last processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions `Ready` and `CredentialsResolved`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// === impl ExternalModelProvider ===

impl ExternalModelProvider {
    /// Applies the defaults: `providerType` `OpenAI`, `insecureSkipVerify` false,
    /// `auth.scheme` `Bearer` for OpenAI and `APIKey` for Anthropic.
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        let s = &mut self.spec;
        let provider = *s.provider_type.get_or_insert(ProviderType::OpenAI);
        s.insecure_skip_verify.get_or_insert(false);
        if let Some(auth) = &mut s.auth {
            auth.scheme.get_or_insert(match provider {
                ProviderType::OpenAI => AuthScheme::Bearer,
                ProviderType::Anthropic => AuthScheme::ApiKey,
            });
        }
        self
    }

    /// Checks the CRD schema limits and CEL rules.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        e.max_len("spec.model", s.model.as_deref(), 256);
        if s.base_url.is_empty() {
            e.push("spec.baseURL", "must not be empty");
        } else {
            e.pattern("spec.baseURL", &s.base_url, "^https://.+");
        }
        if let Some(auth) = &s.auth
            && auth.secret_ref.optional == Some(true)
        {
            e.push("spec.auth", "secretRef.optional must be false or unset");
        }
        e.finish()
    }
}
