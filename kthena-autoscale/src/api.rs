//! Conversions from `kthena-api`'s `AutoscalingPolicy` (feature `api`).
//!
//! Every function applies the CRD and mutating-webhook defaults first
//! (`AutoscalingPolicy::with_defaults`), so a policy read from the API server and one loaded
//! from a file give the same scaler.

use std::collections::BTreeMap;
use std::time::Duration;

use kthena_api::workload::{
    AutoscalingPolicyMetric, RoleRatioConstraint, SelectPolicy as ApiSelect,
    StablePolicy as ApiStable,
};
use kthena_api::{AutoscalingPolicy, GoDuration, quantity_to_f64};

use crate::behavior::{Behavior, PanicPolicy, SelectPolicy, StablePolicy};
use crate::disagg::{RoleParam, RoleRatio, RolesScaler};
use crate::hetero::{Optimizer, TargetParam};
use crate::ratio::{Bounds, Ratio, RatioBounds};
use crate::recommend::Metrics;
use crate::{Error, Result};

fn duration(path: &str, d: Option<&GoDuration>) -> Result<Duration> {
    d.map_or(Ok(Duration::ZERO), |d| {
        d.parse().map_err(|source| Error::InvalidDuration {
            path: path.to_owned(),
            source,
        })
    })
}

fn stable(path: &str, p: Option<&ApiStable>, fallback: StablePolicy) -> Result<StablePolicy> {
    let Some(p) = p else {
        return Ok(fallback);
    };
    Ok(StablePolicy {
        // Go's fallbacks for nil fields (revision.go): 1 instance, 100 percent.
        instances: p.instances.unwrap_or(1),
        percent: p.percent.unwrap_or(100),
        period: duration(&format!("{path}.period"), p.period.as_ref())?,
        select_policy: match p.select_policy.unwrap_or_default() {
            ApiSelect::Or => SelectPolicy::Or,
            ApiSelect::And => SelectPolicy::And,
        },
        stabilization_window: duration(
            &format!("{path}.stabilizationWindow"),
            p.stabilization_window.as_ref(),
        )?,
    })
}

/// The resolved `spec.behavior` of `policy` (after defaulting).
///
/// # Errors
/// [`Error::InvalidDuration`] for an unparsable duration.
pub fn behavior_from_api(policy: &AutoscalingPolicy) -> Result<Behavior> {
    let policy = policy.clone().with_defaults();
    let defaults = Behavior::default();
    let b = policy.spec.behavior.unwrap_or_default();
    let up = b.scale_up.unwrap_or_default();
    let panic = match up.panic_policy {
        None => defaults.panic,
        Some(p) => PanicPolicy {
            percent: p.percent.unwrap_or(1000),
            period: duration("spec.behavior.scaleUp.panicPolicy.period", Some(&p.period))?,
            panic_threshold_percent: p.panic_threshold_percent.unwrap_or(200),
            panic_mode_hold: duration(
                "spec.behavior.scaleUp.panicPolicy.panicModeHold",
                p.panic_mode_hold.as_ref(),
            )?,
        },
    };
    Ok(Behavior {
        scale_up: stable(
            "spec.behavior.scaleUp.stablePolicy",
            up.stable_policy.as_ref(),
            defaults.scale_up,
        )?,
        panic,
        scale_down: stable(
            "spec.behavior.scaleDown",
            b.scale_down.as_ref(),
            defaults.scale_down,
        )?,
    })
}

/// `tolerancePercent × 0.01` (default 10 %), as a ratio 0..=1 (Go computes it this way too,
/// so the band edges round alike).
pub fn tolerance_from_api(policy: &AutoscalingPolicy) -> f64 {
    f64::from(policy.spec.tolerance_percent.unwrap_or(10)) * 0.01
}

/// Metric name → target value of `metrics` (`spec.metrics` or a role's `metrics`).
///
/// # Errors
/// [`Error::InvalidQuantity`] for a target value that is not a quantity.
pub fn metric_targets(path: &str, metrics: &[AutoscalingPolicyMetric]) -> Result<Metrics> {
    metrics
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let v = quantity_to_f64(&m.target_value).ok_or_else(|| Error::InvalidQuantity {
                path: format!("{path}[{i}].targetValue"),
            })?;
            Ok((m.name.clone(), v))
        })
        .collect()
}

/// The optimizer of `spec.heterogeneousTarget` (cost 0 when unset, rate 200 % by default).
///
/// # Errors
/// [`Error::MissingTarget`] without a heterogeneous target; as [`behavior_from_api`].
pub fn optimizer_from_api(policy: &AutoscalingPolicy) -> Result<Optimizer> {
    let h = policy
        .spec
        .heterogeneous_target
        .as_ref()
        .ok_or(Error::MissingTarget("heterogeneousTarget"))?;
    let params = h
        .params
        .iter()
        .map(|p| TargetParam {
            cost: p.cost.unwrap_or(0),
            min_replicas: p.min_replicas,
            max_replicas: p.max_replicas,
        })
        .collect();
    let rate = h.cost_expansion_rate_percent.unwrap_or(200);
    Ok(Optimizer::new(params, rate, behavior_from_api(policy)?))
}

/// The ratio constraint in exact form.
///
/// # Errors
/// [`Error::InvalidQuantity`] when a bound is not a quantity, [`Error::InvalidBound`] when
/// it is not a finite number ≥ 0.
pub fn ratio_from_api(c: &RoleRatioConstraint) -> Result<RoleRatio> {
    let path = "spec.disaggregatedTarget.ratioConstraint";
    let parse = |field: &str, q| {
        let path = format!("{path}.{field}");
        let v = quantity_to_f64(q).ok_or_else(|| Error::InvalidQuantity { path: path.clone() })?;
        Ratio::from_f64(v).map_err(|e| Error::InvalidBound {
            path,
            source: Box::new(e),
        })
    };
    Ok(RoleRatio {
        numerator: c.numerator_role.clone(),
        denominator: c.denominator_role.clone(),
        bounds: RatioBounds {
            min: parse("minRatio", &c.min_ratio)?,
            max: parse("maxRatio", &c.max_ratio)?,
        },
    })
}

/// The role scaler of `spec.disaggregatedTarget`; roles without metrics inherit
/// `spec.metrics`, fixed roles get none.
///
/// # Errors
/// [`Error::MissingTarget`] without a disaggregated target; as [`behavior_from_api`],
/// [`metric_targets`], [`ratio_from_api`] and [`RolesScaler::new`].
pub fn roles_scaler_from_api(policy: &AutoscalingPolicy) -> Result<RolesScaler> {
    let d = policy
        .spec
        .disaggregated_target
        .as_ref()
        .ok_or(Error::MissingTarget("disaggregatedTarget"))?;
    let mut roles = BTreeMap::new();
    for (name, r) in &d.roles {
        let bounds = Bounds {
            min: r.min_replicas,
            max: r.max_replicas,
        };
        let fixed = r.max_replicas > 0 && r.min_replicas == r.max_replicas;
        let targets = if fixed {
            Metrics::new()
        } else if r.metrics.is_empty() {
            metric_targets("spec.metrics", &policy.spec.metrics)?
        } else {
            metric_targets(
                &format!("spec.disaggregatedTarget.roles.{name}.metrics"),
                &r.metrics,
            )?
        };
        roles.insert(name.clone(), RoleParam { bounds, targets });
    }
    let ratio = d
        .ratio_constraint
        .as_ref()
        .map(ratio_from_api)
        .transpose()?;
    RolesScaler::new(roles, ratio, behavior_from_api(policy)?)
}

#[cfg(test)]
mod tests;
