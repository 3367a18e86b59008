//! The metric-derived replica recommendation (Go
//! `pkg/autoscaler/algorithm/recommendation.go`).

use std::collections::BTreeMap;

/// Metric name → value (a pod-summed scrape, or a Prometheus query result).
pub type Metrics = BTreeMap<String, f64>;

/// Largest recommendation (Go `getCeilDesiredInstances` bound).
pub const MAX_RECOMMENDATION: i32 = 1_000_000_000;

/// Everything one recommendation looks at.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    /// Lower replica bound.
    pub min_replicas: i32,
    /// Upper replica bound.
    pub max_replicas: i32,
    /// Replicas now (`spec.replicas`).
    pub current: i32,
    /// Dead band around the target as a ratio 0..=1 (`tolerancePercent / 100`).
    pub tolerance: f64,
    /// Metric name → target value per replica (> 0).
    pub targets: &'a Metrics,
    /// Pods counted but not ready (not Running and Ready).
    pub unready: i32,
    /// One entry per reporting unit. The homogeneous and disaggregated scalers pass one map of
    /// values summed over the ready pods; the heterogeneous optimizer one map per target.
    pub ready: &'a [Metrics],
    /// Metrics from an external source (Prometheus); they take precedence over pod metrics of
    /// the same name.
    pub external: &'a Metrics,
}

/// The recommended replicas, or `None` ("skip") when no target metric has a value.
///
/// * `current < min` ⇒ `min`; `current > max` ⇒ `max`, whatever the metrics say.
/// * Per metric (the result is the maximum over metrics), with `T` its target:
///   * external value `v`: `d = v / T`; `|d / current − 1| ≤ tolerance` ⇒ `current`, else
///     `ceil(d)`;
///   * pod metric: see [`pod_metric`].
/// * The result is clamped to `[min, max]`.
/// * A value [`crate::check_sample`] refuses (NaN, ±Inf, negative, above
///   [`crate::MAX_SAMPLE`]) gives that metric no recommendation (Go scales on it: NaN ceils
///   to 0, so the target went to its minimum).
///
/// Source: Go `RecommendedInstancesAlgorithm.GetRecommendedInstances`.
pub fn recommend(o: &Observation<'_>) -> Option<i32> {
    if o.current < o.min_replicas {
        return Some(o.min_replicas);
    }
    if o.current > o.max_replicas {
        return Some(o.max_replicas);
    }
    let mut best: Option<i32> = None;
    for (name, &target) in o.targets {
        let desired = match o.external.get(name) {
            // A meaningless value (`crate::check_sample`) is no value: skip the metric.
            Some(&v) if !crate::is_usable(v) => None,
            Some(&v) => Some(external_metric(o.current, o.tolerance, target, v)),
            None => pod_metric(o, name, target),
        };
        if let Some(d) = desired {
            best = Some(best.map_or(d, |b| b.max(d)));
        }
    }
    best.map(|r| crate::clamp(r, o.min_replicas, o.max_replicas))
}

fn external_metric(current: i32, tolerance: f64, target: f64, value: f64) -> i32 {
    let desired = value / target;
    let ratio = desired / f64::from(current);
    if (ratio - 1.0).abs() <= tolerance {
        return current;
    }
    ceil_replicas(desired)
}

/// One pod metric `m` with target `T` over the `ready` entries: `S` the sum of the values,
/// `n` the entries having `m`, `k` those missing it; `n = 0`, or any value
/// [`crate::check_sample`] refuses, ⇒ no value. `ratio = S / n / T`.
/// Unready pods are added (as if at 0) only when `ratio ≥ 1` and `unready > 0`.
///
/// * nothing added and `k = 0`: `d = ratio × n` (`= S / T`); `|d / current − 1| ≤ tolerance`
///   ⇒ `current`, else `ceil(d)`;
/// * otherwise `n' = n + k (+ unready)`, missing entries count as at target when scaling
///   down (`S += k × T` if `ratio < 1`), `r' = S / n' / T`; within tolerance, or a change of
///   direction, ⇒ `current`; `d = ceil(r' × n')`, and a `d` moving against `r'`'s direction
///   ⇒ `current`, else `d`.
///
/// FIX (documented in `docs/autoscaler.md`): Go's first case tests `|ratio − 1| ≤ tolerance`. Its
/// homogeneous scaler passes one pod-summed map (`n = 1`), so the band sat around one replica, not
/// around `current` (`getDesiredInstancesForSingleInstanceMetric`): 10 replicas carrying 1.05
/// targets' worth of load stayed at 10 instead of going to 2, and 10 replicas at 1.05 × their
/// target went to 11. Here the band is relative to `current`, as for external metrics. The second
/// case keeps Go's arithmetic.
pub fn pod_metric(o: &Observation<'_>, name: &str, target: f64) -> Option<i32> {
    let mut sum = 0.0;
    let mut n: i64 = 0;
    let mut missing: i64 = 0;
    for entry in o.ready {
        match entry.get(name) {
            Some(&v) if !crate::is_usable(v) => return None,
            Some(v) => {
                n += 1;
                sum += v;
            }
            None => missing += 1,
        }
    }
    if n == 0 {
        return None;
    }
    let ratio = sum / n as f64 / target;
    let unready = i64::from(o.unready);
    let add_unready = unready > 0 && ratio >= 1.0;
    if !add_unready && missing == 0 {
        // FIX: Go compares `ratio` (here `S / T` for one pod-summed entry) with 1, so the band
        // only works near one replica; compare the desired replicas with `current` instead.
        let desired = ratio * n as f64;
        if (desired / f64::from(o.current) - 1.0).abs() <= o.tolerance {
            return Some(o.current);
        }
        return Some(ceil_replicas(desired));
    }
    let mut count = n + missing;
    if ratio < 1.0 {
        sum += missing as f64 * target;
    }
    if add_unready {
        count += unready;
    }
    let new_ratio = sum / count as f64 / target;
    if (new_ratio - 1.0).abs() <= o.tolerance || (ratio >= 1.0) != (new_ratio >= 1.0) {
        return Some(o.current);
    }
    let desired = ceil_replicas(new_ratio * count as f64);
    if (new_ratio < 1.0 && desired > o.current) || (new_ratio >= 1.0 && desired < o.current) {
        return Some(o.current);
    }
    Some(desired)
}

/// `ceil(value)` saturated to `0..=1e9`; NaN ⇒ 0 (Go `getCeilDesiredInstances`).
pub fn ceil_replicas(value: f64) -> i32 {
    if value.is_nan() {
        return 0;
    }
    let c = value.ceil();
    if c < f64::from(MAX_RECOMMENDATION) {
        // In range and integral: the cast is exact (negative values clamp to 0 below).
        (c as i32).max(0)
    } else {
        MAX_RECOMMENDATION
    }
}

#[cfg(test)]
mod tests;
