//! Heterogeneous targets: one replica total spread over several targets, cheapest capacity
//! first (Go `pkg/autoscaler/autoscaler/optimizer.go`).

use std::time::Duration;

use crate::behavior::Behavior;
use crate::recommend::{Metrics, Observation, recommend};
use crate::scaler::{Decision, Scaler};

/// One target of a heterogeneous policy (`heterogeneousTarget.params[i]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetParam {
    /// Cost of one replica (≥ 0).
    pub cost: i32,
    /// Lower replica bound.
    pub min_replicas: i32,
    /// Upper replica bound.
    pub max_replicas: i32,
}

/// A package of replicas of one target, bought as a unit in cost order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Index of the target in the params.
    pub target: usize,
    /// Replicas in the package (≥ 1).
    pub replicas: i32,
    /// `cost × replicas`.
    pub cost: i64,
}

/// The cost-capability plan of a heterogeneous policy plus its scaling state.
#[derive(Clone, Debug)]
pub struct Optimizer {
    params: Vec<TargetParam>,
    order: Vec<Block>,
    min_total: i32,
    max_total: i32,
    scaler: Scaler,
}

/// One input per target, index-aligned with the params.
#[derive(Clone, Debug, Default)]
pub struct TargetObservation {
    /// Replicas of the target now.
    pub current: i32,
    /// Unready pods of the target.
    pub unready: i32,
    /// Pod metrics summed over the target's ready pods; `None` when the target's metrics could
    /// not be collected this round (the target is left out of the recommendation, as Go does).
    pub ready: Option<Metrics>,
    /// External (Prometheus) metrics of the target.
    pub external: Metrics,
}

/// One heterogeneous decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Distribution {
    /// The decision on the replica total.
    pub total: Decision,
    /// Replicas per target, index-aligned with the params.
    pub replicas: Vec<i32>,
}

/// Splits each target's span `max − min` into packages: one package when
/// `costExpansionRatePercent` is 100, else packages of `max(trunc(L), 1)` replicas with
/// `L = 1, r, r², …` (`r = rate / 100`), each costing `cost × replicas`; then orders all
/// packages by cost, then target index (a stable sort).
pub fn scaling_order(params: &[TargetParam], cost_expansion_rate_percent: i32) -> Vec<Block> {
    let mut order = Vec::new();
    let rate = f64::from(cost_expansion_rate_percent) / 100.0;
    for (target, p) in params.iter().enumerate() {
        let mut remaining = p.max_replicas.saturating_sub(p.min_replicas);
        if remaining <= 0 {
            continue;
        }
        if cost_expansion_rate_percent == 100 {
            order.push(Block {
                target,
                replicas: remaining,
                cost: i64::from(p.cost),
            });
            continue;
        }
        let mut len = 1.0_f64;
        while remaining > 0 {
            // Saturating float-to-int cast; `len` only grows past i32 once nothing remains.
            let replicas = remaining.min((len as i32).max(1));
            order.push(Block {
                target,
                replicas,
                cost: i64::from(p.cost) * i64::from(replicas),
            });
            remaining -= replicas;
            len *= rate;
        }
    }
    order.sort_by_key(|b| (b.cost, b.target));
    order
}

/// Whether an external metric is a ratio (replica-weighted average across targets) rather
/// than additive (summed): names ending, case-insensitively, in `_utilization`, `_usage`,
/// `_ratio`, `_percent` or `_saturation` (Go `isRatioMetric`).
pub fn is_ratio_metric(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        "_utilization",
        "_usage",
        "_ratio",
        "_percent",
        "_saturation",
    ]
    .iter()
    .any(|s| lower.ends_with(s))
}

/// Combines the targets' external metrics: ratio metrics as `Σ vᵢ·replicasᵢ / Σ replicasᵢ`
/// (a plain average when all replicas are 0), others as `Σ vᵢ` (Go
/// `aggregateExternalSamples`).
pub fn aggregate_external(targets: &[TargetObservation]) -> Metrics {
    let mut samples: std::collections::BTreeMap<&str, Vec<(f64, i32)>> = Default::default();
    for t in targets.iter().filter(|t| t.ready.is_some()) {
        for (name, &v) in &t.external {
            samples.entry(name).or_default().push((v, t.current));
        }
    }
    let mut out = Metrics::new();
    for (name, s) in samples {
        let value = if !is_ratio_metric(name) {
            s.iter().map(|x| x.0).sum()
        } else {
            let replicas: i64 = s.iter().map(|x| i64::from(x.1)).sum();
            if replicas == 0 {
                s.iter().map(|x| x.0).sum::<f64>() / s.len() as f64
            } else {
                s.iter().map(|x| x.0 * f64::from(x.1)).sum::<f64>() / replicas as f64
            }
        };
        out.insert(name.to_owned(), value);
    }
    out
}

impl Optimizer {
    /// The plan for `params` with `costExpansionRatePercent` (≥ 0, default 200).
    pub fn new(
        params: Vec<TargetParam>,
        cost_expansion_rate_percent: i32,
        behavior: Behavior,
    ) -> Self {
        let order = scaling_order(&params, cost_expansion_rate_percent);
        let min_total = params
            .iter()
            .fold(0i32, |a, p| a.saturating_add(p.min_replicas));
        let max_total = params
            .iter()
            .fold(0i32, |a, p| a.saturating_add(p.max_replicas));
        Self {
            params,
            order,
            min_total,
            max_total,
            scaler: Scaler::new(behavior),
        }
    }

    /// The packages in the order they are filled.
    pub fn order(&self) -> &[Block] {
        &self.order
    }

    /// `(Σ min, Σ max)` of the targets.
    pub fn bounds(&self) -> (i32, i32) {
        (self.min_total, self.max_total)
    }

    /// The scaler of the replica total.
    pub fn scaler(&self) -> &Scaler {
        &self.scaler
    }

    /// Spreads `total` (clamped to the bounds) over the targets: each starts at its minimum,
    /// then the packages are filled in order, each taking `min(remaining, package)`.
    pub fn distribute(&self, total: i32) -> Vec<i32> {
        let mut replicas: Vec<i32> = self.params.iter().map(|p| p.min_replicas).collect();
        let mut remaining = crate::clamp(total, self.min_total, self.max_total) - self.min_total;
        for b in &self.order {
            if remaining <= 0 {
                break;
            }
            let slot = remaining.min(b.replicas);
            replicas[b.target] += slot;
            remaining -= slot;
        }
        replicas
    }

    /// One round: the recommendation over the targets that reported (`recommend.rs`, with the
    /// targets' pod-summed maps as entries, unready pods summed, external metrics aggregated by
    /// [`aggregate_external`]) for the current total `Σ current`, corrected (`scaler.rs`, panic
    /// threshold as configured), recorded, and distributed. `None` when no metric has a value.
    ///
    /// FIX (documented in `docs/autoscaler.md`): the recommendation windows record the
    /// recommendation, as for homogeneous targets; Go's `Optimizer.Optimize` (`optimizer.go` at
    /// v1.0.0) records the corrected value there, which upstream has since fixed too.
    pub fn scale(
        &mut self,
        now: Duration,
        tolerance: f64,
        targets: &Metrics,
        observed: &[TargetObservation],
    ) -> Option<Distribution> {
        self.scale_with_floor(now, tolerance, targets, observed, 0)
    }

    /// [`scale`](Self::scale) with the total's lower bound raised to at least `floor` (1 for
    /// a policy whose targets may all scale to zero but that is running: metrics alone never
    /// take the total to 0, see [`crate::zero`]).
    pub fn scale_with_floor(
        &mut self,
        now: Duration,
        tolerance: f64,
        targets: &Metrics,
        observed: &[TargetObservation],
        floor: i32,
    ) -> Option<Distribution> {
        let lo = self.min_total.max(floor).min(self.max_total);
        let current = observed
            .iter()
            .fold(0i32, |a, t| a.saturating_add(t.current));
        let unready = observed
            .iter()
            .filter(|t| t.ready.is_some())
            .fold(0i32, |a, t| a.saturating_add(t.unready));
        let ready: Vec<Metrics> = observed.iter().filter_map(|t| t.ready.clone()).collect();
        let external = aggregate_external(observed);
        let o = Observation {
            min_replicas: lo,
            max_replicas: self.max_total,
            current,
            tolerance,
            targets,
            unready,
            ready: &ready,
            external: &external,
        };
        let recommended = recommend(&o)?;
        let total = self
            .scaler
            .decide(now, current, recommended, lo, self.max_total);
        self.scaler.record(now, recommended, total.corrected);
        Some(Distribution {
            replicas: self.distribute(total.corrected),
            total,
        })
    }
}

#[cfg(test)]
mod tests;
