//! Scaling behaviour with every default resolved (AutoscalingPolicy `spec.behavior`, Go
//! Kthena `pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go` and
//! `pkg/autoscaler/webhook/autoscalingpolicy_mutator.go`).

use std::time::Duration;

/// How the absolute (`instances`) and relative (`percent`) limits of a period combine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SelectPolicy {
    /// The looser limit: scale up to `max(abs, rel)`, down to `min(abs, rel)` (default).
    #[default]
    Or,
    /// The tighter limit: scale up to `min(abs, rel)`, down to `max(abs, rel)`.
    And,
}

/// Per-period limits of one direction (`behavior.scaleUp.stablePolicy` or
/// `behavior.scaleDown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StablePolicy {
    /// Replicas that may be added or removed per period (≥ 0).
    pub instances: i32,
    /// Percent of the period's reference replicas that may be added or removed (0..=1000).
    pub percent: i32,
    /// Length of the period (0 disables the per-period limit).
    pub period: Duration,
    /// How `instances` and `percent` combine.
    pub select_policy: SelectPolicy,
    /// Recommendations are smoothed over this window: the maximum recommendation over it
    /// when scaling down, the minimum when scaling up (0 disables smoothing).
    pub stabilization_window: Duration,
}

/// Panic-mode scale-up limits (`behavior.scaleUp.panicPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PanicPolicy {
    /// Percent of the period's reference replicas that may be added in panic mode (0..=1000).
    pub percent: i32,
    /// Length of the period (0 disables the panic limit).
    pub period: Duration,
    /// `recommended × 100 ≥ current × threshold` enters (or extends) panic mode (110..=1000).
    pub panic_threshold_percent: i32,
    /// How long panic mode lasts after the last time the threshold was crossed (0 disables
    /// panic mode).
    pub panic_mode_hold: Duration,
}

/// The whole behaviour, as the API server stores it after the mutating webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Behavior {
    /// Stable scale-up limits.
    pub scale_up: StablePolicy,
    /// Panic scale-up limits.
    pub panic: PanicPolicy,
    /// Scale-down limits.
    pub scale_down: StablePolicy,
}

impl Default for Behavior {
    /// What the mutating webhook writes for an omitted `behavior` (Go's
    /// `autoscalingpolicy_mutator.go`): scale up 4
    /// instances Or 100 % per 1 min, no stabilization; scale down 0 instances Or 100 % per
    /// 1 min with a 5 min stabilization window; panic percent 0, period 0, threshold 200 %,
    /// hold 0 (panic mode off).
    fn default() -> Self {
        Self {
            scale_up: StablePolicy {
                instances: 4,
                percent: 100,
                period: Duration::from_secs(60),
                select_policy: SelectPolicy::Or,
                stabilization_window: Duration::ZERO,
            },
            panic: PanicPolicy {
                percent: 0,
                period: Duration::ZERO,
                panic_threshold_percent: 200,
                panic_mode_hold: Duration::ZERO,
            },
            scale_down: StablePolicy {
                instances: 0,
                percent: 100,
                period: Duration::from_secs(60),
                select_policy: SelectPolicy::Or,
                stabilization_window: Duration::from_secs(300),
            },
        }
    }
}
