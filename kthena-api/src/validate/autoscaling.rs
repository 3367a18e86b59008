//! Defaulting and validation of AutoscalingPolicy (CRD schema, CEL rules and the webhooks
//! `pkg/autoscaler/webhook/autoscalingpolicy_{validator,mutator}.go`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::MAX_REPLICAS;
use crate::common::{Errors, FieldError, GoDuration, idx, key};
use crate::quantity;
use crate::workload::{
    AutoscalingPolicy, AutoscalingPolicyBehavior, AutoscalingPolicyMetric, KeySelector,
    MetricSource, PanicPolicy, PrometheusMetricSource, RoleRatioConstraint, RoleScalingParam,
    ScaleToZeroPolicy, ScaleUpBehavior, SelectPolicy, StablePolicy, Target,
};

/// Longest duration accepted in an AutoscalingPolicy `behavior` (30 minutes).
const MAX_BEHAVIOR_DURATION: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Longest `behavior.scaleToZero.idleWindow` accepted (24 hours).
const MAX_IDLE_WINDOW: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// `behavior.scaleToZero.idleWindow` written by the mutating webhook when some target has
/// `minReplicas: 0` and the field is absent.
const DEFAULT_IDLE_WINDOW: &str = "5m";

impl crate::workload::AutoscalingPolicySpec {
    /// Whether some target may go to zero replicas: the homogeneous target's `minReplicas`,
    /// a heterogeneous `params[i].minReplicas` or a disaggregated role's `minReplicas` is 0.
    pub fn allows_zero(&self) -> bool {
        self.homogeneous_target
            .as_ref()
            .is_some_and(|h| h.min_replicas == 0)
            || self
                .heterogeneous_target
                .as_ref()
                .is_some_and(|h| h.params.iter().any(|p| p.min_replicas == 0))
            || self
                .disaggregated_target
                .as_ref()
                .is_some_and(|d| d.roles.values().any(|r| r.min_replicas == 0))
    }
}

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
    /// Applies the CRD defaults, then the mutating webhook's (Go Kthena
    /// `pkg/autoscaler/webhook/autoscalingpolicy_mutator.go`), in the API
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
    /// * Scale to zero (not in Go): when some target has `minReplicas: 0` (the homogeneous
    ///   target, a heterogeneous `params[i]`, a disaggregated role),
    ///   `behavior.scaleToZero.idleWindow` gets `5m` when absent.
    #[must_use]
    pub fn with_defaults(mut self) -> Self {
        let zero = self.spec.allows_zero();
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
        if zero {
            let z = b
                .scale_to_zero
                .get_or_insert_with(ScaleToZeroPolicy::default);
            z.idle_window
                .get_or_insert_with(|| GoDuration::new(DEFAULT_IDLE_WINDOW));
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

/// `minReplicas` in `0..=1000000`, `maxReplicas` in `1..=1000000`, and `min ≤ max` (Go's
/// webhook message, which Go checks for roles only; a homogeneous target or heterogeneous
/// param with `min > max` would be clamped to its maximum with no metric at all).
fn replicas_bounds(e: &mut Errors, path: &str, min: i32, max: i32) {
    if min > max {
        e.push(
            format!("{path}.minReplicas"),
            "minReplicas must be <= maxReplicas",
        );
    }
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
            prometheus_access(e, &format!("{p}.prometheus"), prom);
        }
        if let Some(sel) = src.pod.as_ref().and_then(|p| p.label_selector.as_ref()) {
            label_selector(e, &format!("{p}.pod.labelSelector"), sel);
        }
    }
}

/// `auth` and `tlsConfig` of a Prometheus source: one kind of credentials, every key
/// selector complete, one CA source, credentials and TLS settings only for an `https://`
/// server (a Secret's value is never sent in clear text).
fn prometheus_access(e: &mut Errors, path: &str, prom: &PrometheusMetricSource) {
    if let Some(auth) = &prom.auth {
        let path = format!("{path}.auth");
        if let (Some(_), Some(_)) = (&auth.authorization, &auth.basic_auth) {
            e.push(&path, "authorization and basicAuth are mutually exclusive");
        }
        let credentials = auth.authorization.is_some() || auth.basic_auth.is_some();
        if credentials && !prom.server_url.starts_with("https://") {
            e.push(
                &path,
                "credentials are only sent over TLS: use an https:// serverURL",
            );
        }
        if let Some(a) = &auth.authorization {
            let p = format!("{path}.authorization");
            if a.type_
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case("basic"))
            {
                e.push(
                    format!("{p}.type"),
                    "Basic is not allowed here: use basicAuth",
                );
            } else if a.type_.as_deref().is_some_and(|t| !is_token(t)) {
                e.push(format!("{p}.type"), "must be a single word such as Bearer");
            }
            key_selector(e, &format!("{p}.credentials"), a.credentials.as_ref());
        }
        if let Some(b) = &auth.basic_auth {
            let p = format!("{path}.basicAuth");
            key_selector(e, &format!("{p}.username"), b.username.as_ref());
            key_selector(e, &format!("{p}.password"), b.password.as_ref());
        }
    }
    if let Some(tls) = &prom.tls_config {
        let p = format!("{path}.tlsConfig");
        if !prom.server_url.starts_with("https://") {
            e.push(&p, "only allowed with an https:// serverURL");
        }
        if let Some(ca) = &tls.ca {
            match (&ca.secret, &ca.config_map) {
                (Some(_), Some(_)) => {
                    e.push(
                        format!("{p}.ca"),
                        "secret and configMap are mutually exclusive",
                    );
                }
                (None, None) => {
                    e.push(format!("{p}.ca"), "one of secret and configMap is required")
                }
                (Some(s), None) => key_selector(e, &format!("{p}.ca.secret"), Some(s)),
                (None, Some(c)) => key_selector(e, &format!("{p}.ca.configMap"), Some(c)),
            }
        }
        if tls.server_name.as_deref() == Some("") {
            e.push(format!("{p}.serverName"), "must not be empty");
        }
    }
}

/// An HTTP auth-scheme token (RFC 9110 `token`).
fn is_token(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A Secret or ConfigMap key selector: present, with a name and a key.
fn key_selector(e: &mut Errors, path: &str, sel: Option<&KeySelector>) {
    let Some(sel) = sel else {
        e.push(path, "is required");
        return;
    };
    if sel.name.is_empty() {
        e.push(format!("{path}.name"), "must not be empty");
    }
    if sel.key.is_empty() {
        e.push(format!("{path}.key"), "must not be empty");
    }
}

/// A label selector's `matchExpressions` as apimachinery's `ValidateLabelSelector` checks
/// them (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`):
/// a known operator, values for `In`/`NotIn` and none for `Exists`/`DoesNotExist`.
fn label_selector(e: &mut Errors, path: &str, sel: &LabelSelector) {
    for (i, r) in sel.match_expressions.iter().flatten().enumerate() {
        let p = idx(&format!("{path}.matchExpressions"), i);
        if r.key.is_empty() {
            e.push(format!("{p}.key"), "must not be empty");
        }
        let values = r.values.as_ref().map_or(0, Vec::len);
        match r.operator.as_str() {
            "In" | "NotIn" if values == 0 => e.push(
                format!("{p}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if values > 0 => e.push(
                format!("{p}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => e.push(
                format!("{p}.operator"),
                format!("Unsupported value: \"{other}\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""),
            ),
        }
    }
}

/// `spec.disaggregatedTarget`: its target, one or two roles (two with a ratio constraint),
/// each role's rules, and the ratio constraint.
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
        disaggregated_role(e, &key(&rp, name), name, r, &s.metrics);
    }
    if let Some(rc) = &d.ratio_constraint {
        ratio_constraint(e, &format!("{p}.ratioConstraint"), rc, &d.roles);
    }
}

/// One role of a disaggregated target at path `p`: replica bounds, metrics and sources; a role
/// that is not fixed (`minReplicas != maxReplicas`) needs metrics (its own, else
/// `spec_metrics`) and a source for each of them.
fn disaggregated_role(
    e: &mut Errors,
    p: &str,
    name: &str,
    r: &RoleScalingParam,
    spec_metrics: &[AutoscalingPolicyMetric],
) {
    if name.is_empty() {
        e.push(p, "role name must not be empty");
    }
    replicas_bounds(e, p, r.min_replicas, r.max_replicas);
    metrics(e, &format!("{p}.metrics"), &r.metrics);
    sources(e, &format!("{p}.metricSources"), &r.metric_sources);
    let fixed = r.max_replicas > 0 && r.min_replicas == r.max_replicas;
    let effective: &[AutoscalingPolicyMetric] = if r.metrics.is_empty() {
        spec_metrics
    } else {
        &r.metrics
    };
    if fixed {
        return;
    }
    if effective.is_empty() {
        e.push(format!("{p}.metrics"), "a role that is not fixed (minReplicas != maxReplicas) needs role metrics or spec.metrics");
        return;
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

/// `ratioConstraint` at path `cp`: two different roles that exist, `0 <= minRatio <=
/// maxRatio`, `maxRatio > 0`, and bounds the roles' replica ranges can meet.
fn ratio_constraint(
    e: &mut Errors,
    cp: &str,
    rc: &RoleRatioConstraint,
    roles: &BTreeMap<String, RoleScalingParam>,
) {
    if rc.numerator_role == rc.denominator_role {
        e.push(cp, "numeratorRole and denominatorRole must differ");
    }
    let num = roles.get(&rc.numerator_role);
    let den = roles.get(&rc.denominator_role);
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
        e.push(cp, "minRatio must be less than or equal to maxRatio");
    }
    let (Some(n), Some(dn)) = (num, den) else {
        return;
    };
    if (n.min_replicas == 0) != (dn.min_replicas == 0) {
        e.push(
            cp,
            "numerator and denominator roles must both allow scale to zero or neither",
        );
    }
    if let (Some(lo), Some(hi)) = (min, max)
        && !ratio_achievable(n, dn, lo, hi)
    {
        e.push(
            cp,
            "ratio constraint cannot be satisfied within the roles' minReplicas/maxReplicas",
        );
    }
}

/// Whether some pair of replica counts within the numerator's and denominator's bounds has a
/// ratio in `lo..=hi` (the range of reachable ratios overlaps it).
fn ratio_achievable(n: &RoleScalingParam, dn: &RoleScalingParam, lo: f64, hi: f64) -> bool {
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
    !(lowest > hi || highest < lo)
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
    if let Some(z) = &b.scale_to_zero {
        let path = "spec.behavior.scaleToZero.idleWindow";
        if let Some(v) = e.duration(path, z.idle_window.as_ref())
            && v > MAX_IDLE_WINDOW
        {
            e.push(path, "must be between 0s and 24h");
        }
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

#[cfg(test)]
mod tests;
