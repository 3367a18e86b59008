//! Stable and panic correction of a recommendation (Go `algorithm/revision.go`,
//! `autoscaler/status.go`, `autoscaler/scaler.go`).

use std::time::Duration;

use crate::behavior::{Behavior, SelectPolicy};
use crate::recommend::{Observation, recommend};
use crate::window::{Best, LineChartWindow, RecordWindow};

/// Which rules corrected a recommendation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Stable mode: stabilization windows and per-period limits in both directions.
    Stable,
    /// Panic mode: fast scale-up, never down.
    Panic,
}

impl Mode {
    /// The status string (`Stable`, `Panic`), as Go writes in `TargetScalingStatus.mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stable => "Stable",
            Self::Panic => "Panic",
        }
    }
}

/// One scaling decision of one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Replicas when the decision was made.
    pub current: i32,
    /// The metric-derived recommendation (`recommend.rs`), within `[min, max]`.
    pub recommended: i32,
    /// The replicas to apply, after stabilization and the per-period limits, within
    /// `[min, max]`.
    pub corrected: i32,
    /// The mode after this decision.
    pub mode: Mode,
}

/// The five history windows of a target (Go `algorithm.History`).
#[derive(Clone, Debug)]
struct History {
    /// Recommendations, max over `scaleDown.stabilizationWindow`.
    max_recommendation: RecordWindow,
    /// Recommendations, min over `scaleUp.stablePolicy.stabilizationWindow`.
    min_recommendation: RecordWindow,
    /// Corrected replicas, max over `scaleDown.period`.
    max_corrected: LineChartWindow,
    /// Corrected replicas, min over `scaleUp.stablePolicy.period`.
    min_corrected_stable: LineChartWindow,
    /// Corrected replicas, min over `scaleUp.panicPolicy.period`.
    min_corrected_panic: LineChartWindow,
}

/// The scaling state of one target (or role): its behaviour, panic deadline and history (Go
/// `autoscaler.Status`). Create one per target when the policy is (re)created, then call
/// [`scale`](Self::scale) once per sync period with a monotonic `now`.
#[derive(Clone, Debug)]
pub struct Scaler {
    behavior: Behavior,
    panic_ends_at: Option<Duration>,
    history: History,
}

fn sat(v: i64) -> i32 {
    // Saturating narrowing: every input is an i32, so sums of two fit in i64.
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

impl Scaler {
    /// A scaler with empty history.
    pub fn new(behavior: Behavior) -> Self {
        let b = &behavior;
        Self {
            history: History {
                max_recommendation: RecordWindow::new(b.scale_down.stabilization_window, Best::Max),
                min_recommendation: RecordWindow::new(b.scale_up.stabilization_window, Best::Min),
                max_corrected: LineChartWindow::new(b.scale_down.period, Best::Max),
                min_corrected_stable: LineChartWindow::new(b.scale_up.period, Best::Min),
                min_corrected_panic: LineChartWindow::new(b.panic.period, Best::Min),
            },
            behavior,
            panic_ends_at: None,
        }
    }

    /// The behaviour this scaler applies.
    pub fn behavior(&self) -> &Behavior {
        &self.behavior
    }

    /// Whether panic mode holds at `now`: `panicModeHold > 0` and `now ≤ panicModeEndsAt`.
    pub fn is_panic(&self, now: Duration) -> bool {
        !self.behavior.panic.panic_mode_hold.is_zero()
            && self.panic_ends_at.is_some_and(|end| now <= end)
    }

    /// The mode at `now`.
    pub fn mode(&self, now: Duration) -> Mode {
        if self.is_panic(now) {
            Mode::Panic
        } else {
            Mode::Stable
        }
    }

    /// One homogeneous round: [`recommend`], then [`decide`](Self::decide) and
    /// [`record`](Self::record). `None` when no metric has a value (nothing is recorded).
    pub fn scale(&mut self, now: Duration, o: &Observation<'_>) -> Option<Decision> {
        let recommended = recommend(o)?;
        let d = self.decide(now, o.current, recommended, o.min_replicas, o.max_replicas);
        self.record(now, recommended, d.corrected);
        Some(d)
    }

    /// Corrects `recommended` for a target at `current` replicas within `[min, max]`, and
    /// refreshes panic mode, without recording history (callers that enforce cross-target
    /// rules record afterwards, as Go's disaggregated scaler does).
    ///
    /// * Panic refresh: `recommended × 100 ≥ current × panicThresholdPercent` ⇒
    ///   `panicModeEndsAt = now + panicModeHold`.
    /// * Panic mode: `corrected = recommended`, capped at `p + trunc(p × panic.percent / 100)`
    ///   where `p` is the minimum corrected value over the panic period (when `p > 0`), and
    ///   never below `current`.
    /// * Stable, scaling down: `max(recommended, max recommendation over the scale-down
    ///   stabilization window)`, then at least the per-period constraint from `p`, the maximum
    ///   corrected value over `scaleDown.period`: `abs = p − instances`,
    ///   `rel = p − p × percent / 100` (integer division), `Or` ⇒ `min(abs, rel)`, `And` ⇒
    ///   `max(abs, rel)`; never above `current`.
    /// * Stable, scaling up: `min(recommended, min recommendation over the scale-up
    ///   stabilization window)`, then at most the constraint from `p`, the minimum corrected
    ///   value over `scaleUp.stablePolicy.period`: `abs = p + instances`,
    ///   `rel = p + p × percent / 100`, `Or` ⇒ `max(abs, rel)`, `And` ⇒ `min(abs, rel)`;
    ///   never below `current`.
    /// * Finally clamped to `[min, max]`.
    pub fn decide(
        &mut self,
        now: Duration,
        current: i32,
        recommended: i32,
        min: i32,
        max: i32,
    ) -> Decision {
        let threshold = i64::from(self.behavior.panic.panic_threshold_percent);
        if i64::from(recommended) * 100 >= i64::from(current) * threshold {
            self.refresh_panic(now);
        }
        let corrected = if self.is_panic(now) {
            self.correct_panic(now, current, recommended)
        } else if recommended < current {
            self.correct_down(now, current, recommended)
        } else if recommended > current {
            self.correct_up(now, current, recommended)
        } else {
            recommended
        };
        Decision {
            current,
            recommended,
            corrected: crate::clamp(corrected, min, max),
            mode: self.mode(now),
        }
    }

    /// Appends `recommended` to the two recommendation windows and `corrected` to the three
    /// corrected windows.
    pub fn record(&mut self, now: Duration, recommended: i32, corrected: i32) {
        let h = &mut self.history;
        h.max_recommendation.append(now, recommended);
        h.min_recommendation.append(now, recommended);
        h.max_corrected.append(now, corrected);
        h.min_corrected_stable.append(now, corrected);
        h.min_corrected_panic.append(now, corrected);
    }

    fn refresh_panic(&mut self, now: Duration) {
        let hold = self.behavior.panic.panic_mode_hold;
        self.panic_ends_at = (!hold.is_zero()).then(|| now + hold);
    }

    fn correct_panic(&mut self, now: Duration, current: i32, recommended: i32) -> i32 {
        let mut corrected = recommended;
        if let Some(p) = self.history.min_corrected_panic.best(now, current)
            && p > 0
        {
            let p = i64::from(p);
            let limit = p + p * i64::from(self.behavior.panic.percent) / 100;
            corrected = corrected.min(sat(limit));
        }
        corrected.max(current)
    }

    fn correct_down(&mut self, now: Duration, current: i32, recommended: i32) -> i32 {
        let mut corrected = recommended;
        if let Some(best) = self.history.max_recommendation.best(now) {
            corrected = corrected.max(best);
        }
        if let Some(p) = self.history.max_corrected.best(now, current) {
            let policy = &self.behavior.scale_down;
            let p = i64::from(p);
            let abs = p - i64::from(policy.instances);
            let rel = p - p * i64::from(policy.percent) / 100;
            let constraint = match policy.select_policy {
                SelectPolicy::Or => abs.min(rel),
                SelectPolicy::And => abs.max(rel),
            };
            corrected = corrected.max(sat(constraint));
        }
        corrected.min(current)
    }

    fn correct_up(&mut self, now: Duration, current: i32, recommended: i32) -> i32 {
        let mut corrected = recommended;
        if let Some(best) = self.history.min_recommendation.best(now) {
            corrected = corrected.min(best);
        }
        if let Some(p) = self.history.min_corrected_stable.best(now, current) {
            let policy = &self.behavior.scale_up;
            let p = i64::from(p);
            let abs = p + i64::from(policy.instances);
            let rel = p + p * i64::from(policy.percent) / 100;
            let constraint = match policy.select_policy {
                SelectPolicy::Or => abs.max(rel),
                SelectPolicy::And => abs.min(rel),
            };
            corrected = corrected.min(sat(constraint));
        }
        corrected.max(current)
    }
}

#[cfg(test)]
mod tests;
