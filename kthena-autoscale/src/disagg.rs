//! Disaggregated (role-level) scaling of one `ModelServing` (Go
//! `pkg/autoscaler/autoscaler/disaggregated_scaler.go`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::behavior::Behavior;
use crate::ratio::{Bounds, RatioBounds, enforce_role_ratio};
use crate::recommend::{Metrics, Observation, recommend};
use crate::scaler::{Decision, Mode, Scaler};
use crate::{Error, Result};

/// One role of a disaggregated policy (`disaggregatedTarget.roles[name]`).
#[derive(Clone, Debug, PartialEq)]
pub struct RoleParam {
    /// Replica bounds of the role.
    pub bounds: Bounds,
    /// Metric name → target value per replica (the role's metrics, else `spec.metrics`).
    pub targets: Metrics,
}

impl RoleParam {
    /// A fixed role (`max > 0 && min == max`) is never autoscaled: its replicas are `min`.
    pub fn is_fixed(&self) -> bool {
        self.bounds.max > 0 && self.bounds.min == self.bounds.max
    }
}

/// `ratioConstraint` with its roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleRatio {
    /// Numerator role name.
    pub numerator: String,
    /// Denominator role name.
    pub denominator: String,
    /// Ratio bounds.
    pub bounds: RatioBounds,
}

/// What was observed of one role this round.
#[derive(Clone, Debug, Default)]
pub struct RoleObservation {
    /// `spec.template.roles[i].replicas` now.
    pub current: i32,
    /// Unready pods of the role.
    pub unready: i32,
    /// Pod metrics summed over the role's ready entry pods.
    pub ready: Metrics,
    /// External (Prometheus) metrics of the role.
    pub external: Metrics,
}

/// The decision for one role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleDecision {
    /// Role name.
    pub name: String,
    /// Replicas now.
    pub current: i32,
    /// Metric-derived recommendation (`desiredReplicas` in the status).
    pub recommended: i32,
    /// After behaviour correction, before the ratio.
    pub corrected: i32,
    /// The replicas to patch, after the ratio.
    pub replicas: i32,
    /// Mode after this round.
    pub mode: Mode,
}

/// The decision for all roles, in role-name order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RolesDecision {
    /// Per-role decisions, sorted by name.
    pub roles: Vec<RoleDecision>,
    /// Whether the ratio constraint changed the corrected replicas.
    pub ratio_adjusted: bool,
    /// Whether the final replicas satisfy the constraint (true without a constraint).
    pub ratio_satisfied: bool,
    /// `numerator / denominator` as Go formats it; `None` without a constraint or with a zero
    /// denominator.
    pub current_ratio: Option<String>,
}

/// Scaling state of a disaggregated target: one [`Scaler`] per non-fixed role.
#[derive(Clone, Debug)]
pub struct RolesScaler {
    roles: BTreeMap<String, (RoleParam, Scaler)>,
    ratio: Option<RoleRatio>,
}

impl RolesScaler {
    /// A scaler for `roles` with the policy's `behavior` and optional ratio constraint.
    ///
    /// # Errors
    /// [`Error::UnknownRole`] when the constraint names a role that is not in `roles`.
    pub fn new(
        roles: BTreeMap<String, RoleParam>,
        ratio: Option<RoleRatio>,
        behavior: Behavior,
    ) -> Result<Self> {
        if let Some(r) = &ratio {
            for name in [&r.numerator, &r.denominator] {
                if !roles.contains_key(name) {
                    return Err(Error::UnknownRole(name.clone()));
                }
            }
        }
        let roles = roles
            .into_iter()
            .map(|(k, p)| (k, (p, Scaler::new(behavior))))
            .collect();
        Ok(Self { roles, ratio })
    }

    /// Role names in processing order (sorted).
    pub fn role_names(&self) -> impl Iterator<Item = &str> {
        self.roles.keys().map(String::as_str)
    }

    /// Whether role `name` is fixed (its metrics need not be collected).
    pub fn is_fixed(&self, name: &str) -> bool {
        self.roles.get(name).is_some_and(|(p, _)| p.is_fixed())
    }

    /// One round. Fixed roles get `min` without metrics; every other role gets the recommendation
    /// (`recommend.rs`) and its correction (`scaler.rs`) with its own history; then the ratio is
    /// enforced on the corrected replicas ([`enforce_role_ratio`]), and each role's history records
    /// its recommendation and its corrected (pre-ratio) value. `None` ("skip": nothing changes,
    /// nothing is recorded) when a non-fixed role is missing from `observed` or has no metric
    /// value.
    pub fn scale(
        &mut self,
        now: Duration,
        tolerance: f64,
        observed: &BTreeMap<String, RoleObservation>,
    ) -> Option<RolesDecision> {
        self.scale_with_floor(now, tolerance, observed, 0)
    }

    /// [`scale`](Self::scale) with every role's lower bound raised to at least `floor`
    /// (1 for a target that may scale to zero but is running: metrics alone never take a
    /// role to 0, see [`crate::zero`]).
    pub fn scale_with_floor(
        &mut self,
        now: Duration,
        tolerance: f64,
        observed: &BTreeMap<String, RoleObservation>,
        floor: i32,
    ) -> Option<RolesDecision> {
        let mut decisions: Vec<(RoleDecision, bool)> = Vec::with_capacity(self.roles.len());
        for (name, (param, scaler)) in &mut self.roles {
            let obs = observed.get(name);
            let current = obs.map_or(0, |o| o.current);
            if param.is_fixed() {
                let d = fixed(name, current, param.bounds.min);
                decisions.push((d, false));
                continue;
            }
            let obs = obs?;
            let bounds = raised(param.bounds, floor);
            let o = Observation {
                min_replicas: bounds.min,
                max_replicas: bounds.max,
                current,
                tolerance,
                targets: &param.targets,
                unready: obs.unready,
                ready: std::slice::from_ref(&obs.ready),
                external: &obs.external,
            };
            let recommended = recommend(&o)?;
            let Decision { corrected, .. } =
                scaler.decide(now, current, recommended, bounds.min, bounds.max);
            decisions.push((
                RoleDecision {
                    name: name.clone(),
                    current,
                    recommended,
                    corrected,
                    replicas: corrected,
                    mode: Mode::Stable,
                },
                true,
            ));
        }
        let mut out = RolesDecision {
            ratio_adjusted: false,
            ratio_satisfied: true,
            current_ratio: None,
            roles: Vec::with_capacity(decisions.len()),
        };
        for (d, _) in &mut decisions {
            let b = raised(self.roles[&d.name].0.bounds, floor);
            d.replicas = crate::clamp(d.corrected, b.min, b.max);
        }
        if let Some(r) = &self.ratio {
            self.apply_ratio(r, floor, &mut decisions, &mut out);
        }
        for (mut d, scaled) in decisions {
            let (_, scaler) = self
                .roles
                .get_mut(&d.name)
                .expect("invariant: decided roles exist");
            if scaled {
                scaler.record(now, d.recommended, d.corrected);
                d.mode = scaler.mode(now);
            }
            out.roles.push(d);
        }
        Some(out)
    }

    /// The replicas of every role when a target at zero wakes: each role at
    /// `max(minReplicas, 1)` (a fixed role at its `minReplicas`), then the ratio constraint
    /// ([`enforce_role_ratio`]) with every lower bound raised to 1. Role-name order.
    pub fn wake_replicas(&self) -> BTreeMap<String, i32> {
        let mut out: BTreeMap<String, i32> = self
            .roles
            .iter()
            .map(|(name, (p, _))| (name.clone(), raised(p.bounds, 1).clamp_value(1)))
            .collect();
        if let Some(r) = &self.ratio {
            let e = enforce_role_ratio(
                out[&r.numerator],
                out[&r.denominator],
                raised(self.roles[&r.numerator].0.bounds, 1),
                raised(self.roles[&r.denominator].0.bounds, 1),
                &r.bounds,
            );
            out.insert(r.numerator.clone(), e.numerator);
            out.insert(r.denominator.clone(), e.denominator);
        }
        out
    }

    fn apply_ratio(
        &self,
        r: &RoleRatio,
        floor: i32,
        decisions: &mut [(RoleDecision, bool)],
        out: &mut RolesDecision,
    ) {
        let pos = |name: &str| decisions.iter().position(|(d, _)| d.name == name);
        let (Some(ni), Some(di)) = (pos(&r.numerator), pos(&r.denominator)) else {
            return;
        };
        let e = enforce_role_ratio(
            decisions[ni].0.corrected,
            decisions[di].0.corrected,
            raised(self.roles[&r.numerator].0.bounds, floor),
            raised(self.roles[&r.denominator].0.bounds, floor),
            &r.bounds,
        );
        decisions[ni].0.replicas = e.numerator;
        decisions[di].0.replicas = e.denominator;
        out.ratio_adjusted = e.adjusted;
        out.ratio_satisfied = e.satisfied;
        out.current_ratio = e.current_ratio;
    }
}

/// `b` with its lower bound raised to at least `floor` (the upper bound wins, as in
/// [`crate::clamp`]).
fn raised(b: Bounds, floor: i32) -> Bounds {
    Bounds {
        min: b.min.max(floor),
        max: b.max,
    }
}

fn fixed(name: &str, current: i32, min: i32) -> RoleDecision {
    RoleDecision {
        name: name.to_owned(),
        current,
        recommended: min,
        corrected: min,
        replicas: min,
        mode: Mode::Stable,
    }
}

#[cfg(test)]
mod tests;
