//! Defaulting and validation of the workload kinds.
//!
//! Sources: the CRD schemas and CEL rules of `pkg/apis/workload/v1alpha1`, the ModelServing
//! webhook (`pkg/model-serving-controller/webhook/validator.go`), the ModelBooster webhook
//! (`pkg/model-booster-controller/webhook`), and the AutoscalingPolicy webhooks
//! (`pkg/autoscaler/webhook/autoscalingpolicy_{validator,mutator}.go`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::common::{Errors, FieldError, GoDuration, dns1035_label, idx, key};
use crate::quantity;
use crate::workload::{
    AutoscalingPolicy, AutoscalingPolicyBehavior, AutoscalingPolicyMetric, MetricSource,
    ModelBackendType, ModelBooster, ModelServing, ModelWorkerType, NetworkTopologyMode,
    NetworkTopologySpec, PanicPolicy, RecoveryPolicy, RolloutStrategyType, ScaleUpBehavior,
    SelectPolicy, StablePolicy, Target,
};

/// Longest duration accepted in an AutoscalingPolicy `behavior` (30 minutes).
const MAX_BEHAVIOR_DURATION: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Upper bound of replica counts in the workload CRDs.
const MAX_REPLICAS: i64 = 1_000_000;

// === impl ModelServing ===

impl ModelServing {
    /// Applies the CRD defaults: `replicas` 1, `schedulerName` `volcano`, `recoveryPolicy`
    /// `RoleRecreate`, `template.restartGracePeriodSeconds` 0, each role's `replicas` 1 and
    /// `maxUnavailable` 1, `rolloutStrategy.rollingUpdateConfiguration.maxUnavailable` 1 (when
    /// present), network topology `mode` `hard` (when present). `plugins[].type` (`BuiltIn`)
    /// and `rolloutStrategy.type` (`ServingGroupRollingUpdate`) default when decoded.
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        let s = &mut self.spec;
        s.replicas.get_or_insert(1);
        s.scheduler_name.get_or_insert_with(|| "volcano".to_owned());
        s.recovery_policy
            .get_or_insert(RecoveryPolicy::RoleRecreate);
        if let Some(ru) = s
            .rollout_strategy
            .as_mut()
            .and_then(|r| r.rolling_update_configuration.as_mut())
        {
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
        }
        let t = &mut s.template;
        t.restart_grace_period_seconds.get_or_insert(0);
        if let Some(nt) = &mut t.network_topology {
            for p in [&mut nt.group_policy, &mut nt.role_policy]
                .into_iter()
                .flatten()
            {
                p.mode.get_or_insert(NetworkTopologyMode::Hard);
            }
        }
        for role in &mut t.roles {
            role.replicas.get_or_insert(1);
            role.max_unavailable.get_or_insert(IntOrString::Int(1));
        }
        self
    }

    /// Checks the CRD limits, CEL rules and the ModelServing validating webhook rules.
    /// Call it on a defaulted object (see [`ModelServing::with_defaults`]); unset fields that
    /// the defaults would fill (`replicas`, role `replicas`) are reported as required.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        let name = self.metadata.name.as_deref().unwrap_or("");
        match s.replicas {
            None => e.push("spec.replicas", "replicas must be set"),
            Some(r) if r < 0 => e.push("spec.replicas", "replicas must be a non-negative integer"),
            Some(_) => {}
        }
        let replicas = s.replicas.unwrap_or(0).max(0);
        let rollout = s
            .rollout_strategy
            .as_ref()
            .map(|r| r.type_)
            .unwrap_or_default();
        let recovery = s.recovery_policy.unwrap_or_default();
        if recovery == RecoveryPolicy::ServingGroupRecreate
            && rollout == RolloutStrategyType::RoleRollingUpdate
        {
            e.push(
                "spec.recoveryPolicy",
                "recoveryPolicy ServingGroupRecreate cannot be used with rolloutStrategy \
                 RoleRollingUpdate; valid pairs: (ServingGroupRecreate,ServingGroupRollingUpdate) \
                 or (RoleRecreate,RoleRollingUpdate)",
            );
        }
        if let Some(ru) = s
            .rollout_strategy
            .as_ref()
            .and_then(|r| r.rolling_update_configuration.as_ref())
        {
            let p = "spec.rolloutStrategy.rollingUpdateConfiguration";
            if rollout == RolloutStrategyType::RoleRollingUpdate {
                e.push(
                    p,
                    "rollingUpdateConfiguration is not allowed with RoleRollingUpdate",
                );
            }
            if let Some(mu) = &ru.max_unavailable
                && let Some(v) =
                    int_or_percent(&mut e, &format!("{p}.maxUnavailable"), mu, replicas, false)
                && v == 0
            {
                e.push(
                    format!("{p}.maxUnavailable"),
                    "maxUnavailable must not resolve to 0",
                );
            }
            if let Some(pt) = &ru.partition {
                int_or_percent(&mut e, &format!("{p}.partition"), pt, replicas, true);
            }
        }
        let t = &s.template;
        let rp = "spec.template.roles";
        if t.roles.is_empty() {
            e.push(rp, "roles must not be empty");
        }
        if t.roles.len() > 4 {
            e.push(rp, "must have at most 4 items");
        }
        let mut seen = BTreeSet::new();
        if t.roles.iter().any(|r| !seen.insert(r.name.as_str())) {
            e.push(rp, "roles name must be unique");
        }
        if let Some(nt) = &t.network_topology {
            topology(
                &mut e,
                "spec.template.networkTopology.groupPolicy",
                nt.group_policy.as_ref(),
            );
            topology(
                &mut e,
                "spec.template.networkTopology.rolePolicy",
                nt.role_policy.as_ref(),
            );
        }
        for (i, role) in t.roles.iter().enumerate() {
            let p = idx(rp, i);
            let np = format!("{p}.name");
            if role.name.chars().count() > 12 {
                e.push(&np, "must be at most 12 characters");
            }
            if let Some(msg) = dns1035_label(&role.name) {
                e.push(&np, msg);
            }
            match role.replicas {
                None => e.push(format!("{p}.replicas"), "role replicas must be set"),
                Some(r) if r < 0 => {
                    e.push(
                        format!("{p}.replicas"),
                        "role replicas must be a non-negative integer",
                    );
                }
                Some(_) => {}
            }
            let role_replicas = role.replicas.unwrap_or(0).max(0);
            if role.worker_replicas < 0 {
                e.push(
                    format!("{p}.workerReplicas"),
                    "workerReplicas must be a non-negative integer",
                );
            }
            if role.worker_replicas > 0 && role.worker_template.is_none() {
                e.push(
                    format!("{p}.workerTemplate"),
                    "workerTemplate is required when workerReplicas > 0",
                );
            }
            let generated = format!(
                "{name}-{replicas}-{}-{role_replicas}-{}",
                role.name, role.worker_replicas
            );
            if !name.is_empty()
                && let Some(msg) = dns1035_label(&generated)
            {
                e.push(
                    &np,
                    format!("generated name {generated:?} is not valid: {msg}"),
                );
            }
            images(
                &mut e,
                &format!("{p}.entryTemplate"),
                Some(&role.entry_template),
            );
            images(
                &mut e,
                &format!("{p}.workerTemplate"),
                role.worker_template.as_ref(),
            );
            if role.partition.is_some() && rollout != RolloutStrategyType::RoleRollingUpdate {
                e.push(
                    format!("{p}.partition"),
                    "partition is only allowed with RoleRollingUpdate",
                );
            }
            if let Some(pt) = &role.partition {
                int_or_percent(&mut e, &format!("{p}.partition"), pt, role_replicas, true);
            }
            if rollout == RolloutStrategyType::RoleRollingUpdate
                && let Some(mu) = &role.max_unavailable
            {
                let mp = format!("{p}.maxUnavailable");
                if let Some(v) = int_or_percent(&mut e, &mp, mu, role_replicas, false)
                    && (v < 1 || v > i64::from(role_replicas))
                {
                    e.push(
                        mp,
                        format!("maxUnavailable must resolve to between 1 and {role_replicas}"),
                    );
                }
            }
        }
        if let Some(min) = t
            .gang_policy
            .as_ref()
            .and_then(|g| g.min_role_replicas.as_ref())
        {
            let gp = "spec.template.gangPolicy.minRoleReplicas";
            for (role_name, v) in min {
                let p = key(gp, role_name);
                match t.roles.iter().find(|r| &r.name == role_name) {
                    None => e.push(p, format!("role {role_name:?} does not exist")),
                    Some(r) => {
                        let max = r.replicas.unwrap_or(1);
                        if *v < 0 || *v > max {
                            e.push(
                                p,
                                format!("must be between 0 and {max} (the role's replicas)"),
                            );
                        }
                    }
                }
            }
        }
        e.finish()
    }

    /// Checks the transition rules against the stored object: `gangPolicy` cannot be removed
    /// once set, and `gangPolicy.minRoleReplicas` is immutable.
    ///
    /// # Errors
    /// One [`FieldError`] per violated rule.
    pub fn validate_update(&self, old: &Self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let (new, old) = (
            &self.spec.template.gang_policy,
            &old.spec.template.gang_policy,
        );
        match (old, new) {
            (Some(_), None) => e.push("spec.template", "gangPolicy is required once set"),
            (Some(o), Some(n)) if o.min_role_replicas != n.min_role_replicas => {
                e.push(
                    "spec.template.gangPolicy.minRoleReplicas",
                    "minRoleReplicas is immutable",
                );
            }
            _ => {}
        }
        e.finish()
    }
}

fn topology(e: &mut Errors, path: &str, spec: Option<&NetworkTopologySpec>) {
    let Some(spec) = spec else { return };
    if spec.highest_tier_allowed.is_some_and(|v| v < 0) {
        e.push(format!("{path}.highestTierAllowed"), "must be at least 0");
    }
    e.max_len(
        &format!("{path}.highestTierName"),
        spec.highest_tier_name.as_deref(),
        253,
    );
}

/// Resolves an int-or-percent against `total` (percent rounded up or down); reports values
/// that are negative, malformed or above 100%.
fn int_or_percent(
    e: &mut Errors,
    path: &str,
    v: &IntOrString,
    total: i32,
    round_up: bool,
) -> Option<i64> {
    match v {
        IntOrString::Int(i) if *i < 0 => {
            e.push(path, "must be a non-negative integer");
            None
        }
        IntOrString::Int(i) => Some(i64::from(*i)),
        IntOrString::String(s) => {
            let pct = s.strip_suffix('%').and_then(|n| n.parse::<i64>().ok());
            match pct {
                Some(p) if (0..=100).contains(&p) => {
                    let scaled = p * i64::from(total);
                    Some(if round_up {
                        (scaled + 99) / 100
                    } else {
                        scaled / 100
                    })
                }
                Some(_) => {
                    e.push(path, "percentage must be between 0% and 100%");
                    None
                }
                None => {
                    e.push(
                        path,
                        format!("invalid value {s:?}: must be an integer or a percentage"),
                    );
                    None
                }
            }
        }
    }
}

/// Container images must not be blank or contain spaces.
fn images(e: &mut Errors, path: &str, template: Option<&PodTemplateSpec>) {
    let Some(spec) = template.and_then(|t| t.spec.as_ref()) else {
        return;
    };
    for (list, containers) in [
        ("initContainers", spec.init_containers.as_deref()),
        ("containers", Some(spec.containers.as_slice())),
    ] {
        for (j, c) in containers.unwrap_or_default().iter().enumerate() {
            if let Some(img) = &c.image {
                image_rule(e, &format!("{path}.spec.{list}[{j}].image"), img);
            }
        }
    }
}

fn image_rule(e: &mut Errors, path: &str, image: &str) {
    if image.trim().is_empty() {
        e.push(path, "container image must not be empty or whitespace only");
    } else if image.contains(char::is_whitespace) {
        e.push(path, "container image must not contain spaces");
    }
}

// === impl ModelBooster ===

impl ModelBooster {
    /// Applies the CRD defaults: each worker's `type` defaults to `server`. (The mutating
    /// webhook is a no-op; `spec.name` falls back to `metadata.name` where it is used, it is
    /// not written.)
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        for w in &mut self.spec.backend.workers {
            w.type_.get_or_insert(ModelWorkerType::Server);
        }
        self
    }

    /// The request model name: `spec.name`, else `metadata.name`.
    pub fn model_name(&self) -> &str {
        self.spec
            .name
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or("")
    }

    /// Checks the CRD limits and the ModelBooster validating webhook rules.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        if let Some(n) = &s.name {
            e.max_len("spec.name", Some(n), 64);
            e.pattern("spec.name", n, "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
        }
        let b = &s.backend;
        e.pattern(
            "spec.backend.name",
            &b.name,
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        );
        e.pattern(
            "spec.backend.modelURI",
            &b.model_uri,
            "^(hf://|s3://|obs://|pvc://|ms://).+",
        );
        if let Some(c) = &b.cache_uri {
            e.pattern("spec.backend.cacheURI", c, "^(hostpath://|pvc://).+");
        }
        e.range_i64(
            "spec.backend.replicas",
            Some(i64::from(b.replicas)),
            0,
            MAX_REPLICAS,
        );
        let wp = "spec.backend.workers";
        if b.workers.is_empty() {
            e.push(wp, "must have at least 1 item");
        }
        if b.workers.len() > 1000 {
            e.push(wp, "must have at most 1000 items");
        }
        for (i, w) in b.workers.iter().enumerate() {
            let p = idx(wp, i);
            e.range_i64(
                &format!("{p}.replicas"),
                w.replicas.map(i64::from),
                0,
                MAX_REPLICAS,
            );
            e.range_i64(&format!("{p}.pods"), w.pods.map(i64::from), 0, MAX_REPLICAS);
            if let Some(img) = &w.image {
                image_rule(&mut e, &format!("{p}.image"), img);
            }
        }
        let types: Vec<ModelWorkerType> = b
            .workers
            .iter()
            .map(|w| w.type_.unwrap_or_default())
            .collect();
        match b.type_ {
            ModelBackendType::VLlm => {
                let servers = types
                    .iter()
                    .filter(|t| **t == ModelWorkerType::Server)
                    .count();
                if servers != 1 || types.len() != 1 {
                    e.push(
                        wp,
                        "backend type vLLM requires exactly one worker of type server",
                    );
                }
            }
            ModelBackendType::VLlmDisaggregated => {
                for (i, t) in types.iter().enumerate() {
                    if !matches!(t, ModelWorkerType::Prefill | ModelWorkerType::Decode) {
                        e.push(
                            format!("{}.type", idx(wp, i)),
                            "backend type vLLMDisaggregated only allows workers of type prefill or decode",
                        );
                    }
                }
            }
        }
        booster_ports(&mut e, self);
        booster_pvc(&mut e, self);
        booster_kv(&mut e, self);
        e.finish()
    }
}

/// Engine ports (worker config `port`, default 8000) must be valid and agree across the
/// server, prefill and decode workers.
fn booster_ports(e: &mut Errors, mb: &ModelBooster) {
    let mut first: Option<i64> = None;
    for (i, w) in mb.spec.backend.workers.iter().enumerate() {
        if !matches!(
            w.type_.unwrap_or_default(),
            ModelWorkerType::Server | ModelWorkerType::Prefill | ModelWorkerType::Decode
        ) {
            continue;
        }
        let p = format!("spec.backend.workers[{i}].config.port");
        let port = match w.config.as_ref().and_then(|c| c.get("port")) {
            None => 8000,
            Some(v) => match v
                .as_i64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            {
                Some(n) => n,
                None => {
                    e.push(p, "port must be an integer");
                    continue;
                }
            },
        };
        if !(1..=65535).contains(&port) {
            e.push(p, "port must be between 1 and 65535");
            continue;
        }
        match first {
            None => first = Some(port),
            Some(f) if f != port => {
                e.push(
                    p,
                    format!("all server, prefill and decode workers must use the same port ({f})"),
                );
            }
            Some(_) => {}
        }
    }
}

/// A `pvc://` model URI needs a `pvc://` cache URI naming a single claim, the same claim as
/// the model path, without `..`.
fn booster_pvc(e: &mut Errors, mb: &ModelBooster) {
    let b = &mb.spec.backend;
    let Some(model_path) = b.model_uri.strip_prefix("pvc://") else {
        return;
    };
    if model_path.split('/').any(|seg| seg == "..") {
        e.push("spec.backend.modelURI", "modelURI must not contain '..'");
    }
    let Some(cache) = b
        .cache_uri
        .as_deref()
        .and_then(|c| c.strip_prefix("pvc://"))
    else {
        e.push(
            "spec.backend.cacheURI",
            "cacheURI must be a pvc:// URI when modelURI is a pvc:// URI",
        );
        return;
    };
    let claim = cache.trim_end_matches('/');
    if claim.is_empty() || claim.contains('/') {
        e.push(
            "spec.backend.cacheURI",
            "cacheURI must name a single PVC claim (pvc://<claim>)",
        );
        return;
    }
    let model_claim = model_path.split('/').next().unwrap_or("");
    if model_claim != claim {
        e.push(
            "spec.backend.modelURI",
            format!("modelURI path must be under the cache claim /{claim}"),
        );
    }
}

/// Prefill and decode `kv-transfer-config` must be JSON objects with matching connectors and
/// compatible roles.
fn booster_kv(e: &mut Errors, mb: &ModelBooster) {
    let mut connectors: Vec<(usize, String)> = Vec::new();
    for (i, w) in mb.spec.backend.workers.iter().enumerate() {
        let t = w.type_.unwrap_or_default();
        let Some(raw) = w.config.as_ref().and_then(|c| c.get("kv-transfer-config")) else {
            continue;
        };
        let p = format!("spec.backend.workers[{i}].config.kv-transfer-config");
        let parsed = match raw {
            serde_json::Value::String(s) => serde_json::from_str::<serde_json::Value>(s).ok(),
            other => Some(other.clone()),
        };
        let Some(cfg) = parsed.filter(serde_json::Value::is_object) else {
            e.push(p, "kv-transfer-config must be a JSON object");
            continue;
        };
        let role = cfg
            .get("kv_role")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let ok = match t {
            ModelWorkerType::Prefill => matches!(role, "kv_producer" | "kv_both"),
            ModelWorkerType::Decode => matches!(role, "kv_consumer" | "kv_both"),
            _ => true,
        };
        if !ok {
            let want = if t == ModelWorkerType::Prefill {
                "kv_producer or kv_both"
            } else {
                "kv_consumer or kv_both"
            };
            e.push(format!("{p}.kv_role"), format!("kv_role must be {want}"));
        }
        if matches!(t, ModelWorkerType::Prefill | ModelWorkerType::Decode) {
            let c = cfg
                .get("kv_connector")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned();
            connectors.push((i, c));
        }
    }
    if let Some((_, first)) = connectors.first() {
        for (i, c) in &connectors[1..] {
            if c != first {
                e.push(
                    format!("spec.backend.workers[{i}].config.kv-transfer-config.kv_connector"),
                    format!("prefill and decode workers must use the same kv_connector ({first})"),
                );
            }
        }
    }
}

// === impl AutoscalingPolicy ===

fn default_scale_down() -> StablePolicy {
    StablePolicy {
        instances: Some(0),
        percent: Some(100),
        period: Some(GoDuration::new("1m")),
        select_policy: Some(SelectPolicy::Or),
        stabilization_window: Some(GoDuration::new("5m")),
    }
}

fn default_stable_up() -> StablePolicy {
    StablePolicy {
        instances: Some(4),
        percent: Some(100),
        period: Some(GoDuration::new("1m")),
        select_policy: Some(SelectPolicy::Or),
        stabilization_window: Some(GoDuration::new("0s")),
    }
}

fn default_panic() -> PanicPolicy {
    PanicPolicy {
        percent: Some(0),
        period: GoDuration::new("0s"),
        panic_threshold_percent: Some(200),
        panic_mode_hold: Some(GoDuration::new("0s")),
    }
}

fn crd_stable_defaults(p: &mut StablePolicy) {
    p.instances.get_or_insert(1);
    p.percent.get_or_insert(100);
    p.period.get_or_insert_with(|| GoDuration::new("15s"));
    p.select_policy.get_or_insert(SelectPolicy::Or);
}

fn crd_source_defaults(sources: &mut BTreeMap<String, MetricSource>) {
    for src in sources.values_mut() {
        if let Some(pod) = &mut src.pod {
            pod.uri.get_or_insert_with(|| "/metrics".to_owned());
            pod.port.get_or_insert(8100);
        }
    }
}

impl AutoscalingPolicy {
    /// Applies the CRD defaults, then the mutating webhook's (spec §5.4.2), in the API
    /// server's order:
    ///
    /// * CRD: `tolerancePercent` 10, `heterogeneousTarget.costExpansionRatePercent` 200, pod
    ///   metric sources `uri` `/metrics` and `port` 8100; inside a present stable policy
    ///   `instances` 1, `percent` 100, `period` `15s`, `selectPolicy` `Or`; inside a present
    ///   panic policy `percent` 1000, `panicThresholdPercent` 200, `panicModeHold` `60s`.
    /// * Mutator: a missing `behavior`, `scaleDown`, `scaleUp`, `stablePolicy` or
    ///   `panicPolicy` gets the webhook's defaults (scale down: instances 0, percent 100,
    ///   period 1m, Or, window 5m; stable up: instances 4, percent 100, period 1m, Or,
    ///   window 0s; panic: percent 0, period 0s, threshold 200, hold 0s); a present
    ///   `scaleDown` without `stabilizationWindow` gets `5m`, a present `stablePolicy`
    ///   without one gets `0s`.
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        let s = &mut self.spec;
        s.tolerance_percent.get_or_insert(10);
        if let Some(h) = &mut s.homogeneous_target {
            crd_source_defaults(&mut h.target.metric_sources);
        }
        if let Some(h) = &mut s.heterogeneous_target {
            h.cost_expansion_rate_percent.get_or_insert(200);
            for p in &mut h.params {
                crd_source_defaults(&mut p.target.metric_sources);
            }
        }
        if let Some(d) = &mut s.disaggregated_target {
            for r in d.roles.values_mut() {
                crd_source_defaults(&mut r.metric_sources);
            }
        }
        // CRD defaults inside present objects.
        if let Some(b) = &mut s.behavior {
            if let Some(down) = &mut b.scale_down {
                crd_stable_defaults(down);
            }
            if let Some(up) = &mut b.scale_up {
                if let Some(st) = &mut up.stable_policy {
                    crd_stable_defaults(st);
                }
                if let Some(pp) = &mut up.panic_policy {
                    pp.percent.get_or_insert(1000);
                    pp.panic_threshold_percent.get_or_insert(200);
                    pp.panic_mode_hold
                        .get_or_insert_with(|| GoDuration::new("60s"));
                }
            }
        }
        // Mutating webhook.
        let b = s
            .behavior
            .get_or_insert_with(AutoscalingPolicyBehavior::default);
        match &mut b.scale_down {
            None => b.scale_down = Some(default_scale_down()),
            Some(d) => {
                d.stabilization_window
                    .get_or_insert_with(|| GoDuration::new("5m"));
            }
        }
        let up = b.scale_up.get_or_insert_with(ScaleUpBehavior::default);
        if up.stable_policy.is_none() && up.panic_policy.is_none() {
            up.stable_policy = Some(default_stable_up());
            up.panic_policy = Some(default_panic());
        } else {
            match &mut up.stable_policy {
                None => up.stable_policy = Some(default_stable_up()),
                Some(st) => {
                    st.stabilization_window
                        .get_or_insert_with(|| GoDuration::new("0s"));
                }
            }
            up.panic_policy.get_or_insert_with(default_panic);
        }
        self
    }

    /// Checks the CRD limits, CEL rules and the AutoscalingPolicy validating webhook rules.
    ///
    /// # Errors
    /// One [`FieldError`] per problem, with the JSON path of the field.
    pub fn validate(&self) -> std::result::Result<(), Vec<FieldError>> {
        let mut e = Errors::default();
        let s = &self.spec;
        e.range_i64(
            "spec.tolerancePercent",
            s.tolerance_percent.map(i64::from),
            0,
            100,
        );
        metrics(&mut e, "spec.metrics", &s.metrics);
        let targets = usize::from(s.homogeneous_target.is_some())
            + usize::from(s.heterogeneous_target.is_some())
            + usize::from(s.disaggregated_target.is_some());
        if targets != 1 {
            e.push(
                "spec",
                "exactly one of homogeneousTarget, heterogeneousTarget or disaggregatedTarget must be set",
            );
        }
        if let Some(h) = &s.homogeneous_target {
            let p = "spec.homogeneousTarget";
            if s.metrics.is_empty() {
                e.push(
                    "spec.metrics",
                    "at least one metric is required for homogeneousTarget",
                );
            }
            target(&mut e, &format!("{p}.target"), &h.target);
            replicas_bounds(&mut e, p, h.min_replicas, h.max_replicas);
        }
        if let Some(h) = &s.heterogeneous_target {
            let p = "spec.heterogeneousTarget";
            if s.metrics.is_empty() {
                e.push(
                    "spec.metrics",
                    "at least one metric is required for heterogeneousTarget",
                );
            }
            if h.params.is_empty() {
                e.push(format!("{p}.params"), "must have at least 1 item");
            }
            if h.cost_expansion_rate_percent.is_some_and(|v| v < 0) {
                e.push(
                    format!("{p}.costExpansionRatePercent"),
                    "must be at least 0",
                );
            }
            for (i, param) in h.params.iter().enumerate() {
                let pp = idx(&format!("{p}.params"), i);
                target(&mut e, &format!("{pp}.target"), &param.target);
                if param.cost.is_some_and(|c| c < 0) {
                    e.push(format!("{pp}.cost"), "must be at least 0");
                }
                replicas_bounds(&mut e, &pp, param.min_replicas, param.max_replicas);
            }
        }
        if s.disaggregated_target.is_some() {
            disaggregated(&mut e, self);
        }
        if let Some(b) = &s.behavior {
            behavior(&mut e, b);
        }
        e.finish()
    }
}

fn replicas_bounds(e: &mut Errors, path: &str, min: i32, max: i32) {
    e.range_i64(
        &format!("{path}.minReplicas"),
        Some(i64::from(min)),
        0,
        MAX_REPLICAS,
    );
    e.range_i64(
        &format!("{path}.maxReplicas"),
        Some(i64::from(max)),
        1,
        MAX_REPLICAS,
    );
}

/// Metric names non-empty and unique; target values positive and finite.
fn metrics(e: &mut Errors, path: &str, list: &[AutoscalingPolicyMetric]) {
    let mut seen = BTreeSet::new();
    for (i, m) in list.iter().enumerate() {
        let p = idx(path, i);
        if m.name.is_empty() {
            e.push(format!("{p}.name"), "metric name must not be empty");
        } else if !seen.insert(m.name.as_str()) {
            e.push(
                format!("{p}.name"),
                format!("duplicate metric name {:?}", m.name),
            );
        }
        match quantity::to_f64(&m.target_value) {
            Ok(v) if v.is_finite() && v > 0.0 => {}
            Ok(v) if v > 0.0 => e.push(format!("{p}.targetValue"), "targetValue must be finite"),
            Ok(_) => e.push(
                format!("{p}.targetValue"),
                "targetValue must be greater than 0",
            ),
            Err(msg) => e.push(format!("{p}.targetValue"), msg),
        }
    }
}

fn target_ref(e: &mut Errors, path: &str, r: &ObjectReference) {
    if let Some(kind) = r.kind.as_deref()
        && !kind.is_empty()
        && kind != "ModelServing"
    {
        e.push(
            format!("{path}.kind"),
            "targetRef kind must be empty or ModelServing",
        );
    }
    if r.name.as_deref().unwrap_or("").is_empty() {
        e.push(format!("{path}.name"), "targetRef name must not be empty");
    }
}

fn target(e: &mut Errors, path: &str, t: &Target) {
    target_ref(e, &format!("{path}.targetRef"), &t.target_ref);
    sources(e, &format!("{path}.metricSources"), &t.metric_sources);
}

/// The CEL one-of rule and the field limits of every metric source.
fn sources(e: &mut Errors, path: &str, map: &BTreeMap<String, MetricSource>) {
    for (name, src) in map {
        let p = key(path, name);
        match (&src.pod, &src.prometheus) {
            (None, None) => e.push(&p, "one metric source backend config is required"),
            (Some(_), Some(_)) => e.push(&p, "pod and prometheus configs are mutually exclusive"),
            _ => {}
        }
        if let Some(pod) = &src.pod {
            e.range_i64(&format!("{p}.pod.port"), pod.port.map(i64::from), 1, 65535);
            if let Some(uri) = &pod.uri
                && !uri.starts_with('/')
            {
                e.push(format!("{p}.pod.uri"), "must match pattern ^/");
            }
        }
        if let Some(prom) = &src.prometheus {
            if prom.server_url.is_empty() {
                e.push(format!("{p}.prometheus.serverURL"), "must not be empty");
            } else if !crate::common::matches_pattern(
                &prom.server_url,
                // Go `url.ParseRequestURI` (the `uri` format): an absolute URI or path.
                r"^([A-Za-z][A-Za-z0-9+.-]*:\S+|/\S*)$",
            ) {
                e.push(
                    format!("{p}.prometheus.serverURL"),
                    "must be an absolute URI or path",
                );
            }
            if prom.query.is_empty() {
                e.push(format!("{p}.prometheus.query"), "must not be empty");
            }
        }
    }
}

fn disaggregated(e: &mut Errors, policy: &AutoscalingPolicy) {
    let s = &policy.spec;
    let Some(d) = &s.disaggregated_target else {
        return;
    };
    let p = "spec.disaggregatedTarget";
    target_ref(e, &format!("{p}.targetRef"), &d.target_ref);
    let rp = format!("{p}.roles");
    if d.roles.is_empty() {
        e.push(&rp, "must have at least 1 role");
    }
    if d.roles.len() > 2 {
        e.push(&rp, "must have at most 2 roles");
    }
    if d.ratio_constraint.is_some() && d.roles.len() < 2 {
        e.push(
            p,
            "roles must contain at least two entries when ratioConstraint is configured",
        );
    }
    for (name, r) in &d.roles {
        let p = key(&rp, name);
        if name.is_empty() {
            e.push(&p, "role name must not be empty");
        }
        replicas_bounds(e, &p, r.min_replicas, r.max_replicas);
        if r.min_replicas > r.max_replicas {
            e.push(
                format!("{p}.minReplicas"),
                "minReplicas must be less than or equal to maxReplicas",
            );
        }
        metrics(e, &format!("{p}.metrics"), &r.metrics);
        sources(e, &format!("{p}.metricSources"), &r.metric_sources);
        let fixed = r.max_replicas > 0 && r.min_replicas == r.max_replicas;
        let effective: &[AutoscalingPolicyMetric] = if r.metrics.is_empty() {
            &s.metrics
        } else {
            &r.metrics
        };
        if fixed {
            continue;
        }
        if effective.is_empty() {
            e.push(format!("{p}.metrics"), "a role that is not fixed (minReplicas != maxReplicas) needs role metrics or spec.metrics");
            continue;
        }
        if r.metric_sources.is_empty() {
            e.push(
                format!("{p}.metricSources"),
                "metricSources is required for a role with metrics",
            );
        }
        for src in r.metric_sources.keys() {
            if !effective.iter().any(|m| &m.name == src) {
                e.push(
                    key(&format!("{p}.metricSources"), src),
                    format!("{src:?} is not one of the role's metrics"),
                );
            }
        }
    }
    let Some(rc) = &d.ratio_constraint else {
        return;
    };
    let cp = format!("{p}.ratioConstraint");
    if rc.numerator_role == rc.denominator_role {
        e.push(&cp, "numeratorRole and denominatorRole must differ");
    }
    let num = d.roles.get(&rc.numerator_role);
    let den = d.roles.get(&rc.denominator_role);
    if num.is_none() {
        e.push(
            format!("{cp}.numeratorRole"),
            format!("role {:?} is not in roles", rc.numerator_role),
        );
    }
    if den.is_none() {
        e.push(
            format!("{cp}.denominatorRole"),
            format!("role {:?} is not in roles", rc.denominator_role),
        );
    }
    let min = ratio(e, &format!("{cp}.minRatio"), &rc.min_ratio);
    let max = ratio(e, &format!("{cp}.maxRatio"), &rc.max_ratio);
    if let Some(v) = min
        && v < 0.0
    {
        e.push(format!("{cp}.minRatio"), "minRatio must be at least 0");
    }
    if let Some(v) = max
        && v <= 0.0
    {
        e.push(format!("{cp}.maxRatio"), "maxRatio must be greater than 0");
    }
    if let (Some(lo), Some(hi)) = (min, max)
        && lo > hi
    {
        e.push(&cp, "minRatio must be less than or equal to maxRatio");
    }
    let (Some(n), Some(dn)) = (num, den) else {
        return;
    };
    if (n.min_replicas == 0) != (dn.min_replicas == 0) {
        e.push(
            &cp,
            "numerator and denominator roles must both allow scale to zero or neither",
        );
    }
    if let (Some(lo), Some(hi)) = (min, max) {
        // Achievable: some replica pair within the bounds satisfies the ratio.
        let lowest = if dn.max_replicas > 0 {
            f64::from(n.min_replicas) / f64::from(dn.max_replicas)
        } else {
            f64::INFINITY
        };
        let highest = if dn.min_replicas > 0 {
            f64::from(n.max_replicas) / f64::from(dn.min_replicas)
        } else {
            f64::INFINITY
        };
        if lowest > hi || highest < lo {
            e.push(
                &cp,
                "ratio constraint cannot be satisfied within the roles' minReplicas/maxReplicas",
            );
        }
    }
}

fn ratio(
    e: &mut Errors,
    path: &str,
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Option<f64> {
    match quantity::to_f64(q) {
        Ok(v) if v.is_finite() => Some(v),
        Ok(_) => {
            e.push(path, "must be finite");
            None
        }
        Err(msg) => {
            e.push(path, msg);
            None
        }
    }
}

fn behavior(e: &mut Errors, b: &AutoscalingPolicyBehavior) {
    let window = |e: &mut Errors, path: &str, d: Option<&GoDuration>| {
        if let Some(v) = e.duration(path, d)
            && v > MAX_BEHAVIOR_DURATION
        {
            e.push(path, "must be between 0s and 30m");
        }
    };
    if let Some(down) = &b.scale_down {
        stable(e, "spec.behavior.scaleDown", down);
        window(e, "spec.behavior.scaleDown.period", down.period.as_ref());
        window(
            e,
            "spec.behavior.scaleDown.stabilizationWindow",
            down.stabilization_window.as_ref(),
        );
    }
    if let Some(up) = &b.scale_up {
        if let Some(st) = &up.stable_policy {
            let p = "spec.behavior.scaleUp.stablePolicy";
            stable(e, p, st);
            window(e, &format!("{p}.period"), st.period.as_ref());
            window(
                e,
                &format!("{p}.stabilizationWindow"),
                st.stabilization_window.as_ref(),
            );
        }
        if let Some(pp) = &up.panic_policy {
            let p = "spec.behavior.scaleUp.panicPolicy";
            e.range_i64(&format!("{p}.percent"), pp.percent.map(i64::from), 0, 1000);
            e.range_i64(
                &format!("{p}.panicThresholdPercent"),
                pp.panic_threshold_percent.map(i64::from),
                110,
                1000,
            );
            window(e, &format!("{p}.period"), Some(&pp.period));
            window(
                e,
                &format!("{p}.panicModeHold"),
                pp.panic_mode_hold.as_ref(),
            );
        }
    }
}

fn stable(e: &mut Errors, path: &str, p: &StablePolicy) {
    if p.instances.is_some_and(|v| v < 0) {
        e.push(format!("{path}.instances"), "must be at least 0");
    }
    e.range_i64(
        &format!("{path}.percent"),
        p.percent.map(i64::from),
        0,
        1000,
    );
}
