//! Kthena's autoscaling math, as a pure library: the formulas of Go Kthena's autoscaler
//! (`pkg/autoscaler`), with time passed in.
//!
//! It is **not** a controller: it reads no clock, scrapes no pod and talks to no API server.
//! Its default features depend on nothing of Kubernetes, HTTP or async runtimes (checked by
//! `scripts/check-deps.sh`); the `api` feature adds conversions from `kthena-api`'s
//! `AutoscalingPolicy` types. `kthena-controller`'s `autoscaler` controller drives it.
//!
//! Start with [`Scaler`] (one target: recommendation, stable and panic correction), then
//! [`Optimizer`] (heterogeneous targets, cheapest capacity first) and [`RolesScaler`]
//! (prefill/decode roles with a ratio constraint). Every stateful call takes `now`, a
//! [`Duration`](std::time::Duration) since an epoch of the caller's choosing, so tests are
//! deterministic.
//!
//! ```
//! use std::time::Duration;
//! use kthena_autoscale::{Behavior, Metrics, Observation, Scaler};
//!
//! let targets = Metrics::from([("vllm:num_requests_waiting".to_owned(), 10.0)]);
//! // 45 requests waiting over all ready pods, 2 replicas now.
//! let ready = [Metrics::from([("vllm:num_requests_waiting".to_owned(), 45.0)])];
//! let o = Observation {
//!     min_replicas: 1,
//!     max_replicas: 8,
//!     current: 2,
//!     tolerance: 0.1,
//!     targets: &targets,
//!     unready: 0,
//!     ready: &ready,
//!     external: &Metrics::new(),
//! };
//! let mut scaler = Scaler::new(Behavior::default());
//! let d = scaler.scale(Duration::from_secs(0), &o).expect("a metric has a value");
//! // ceil(45 / 10) = 5; the default scale-up limit allows 2 + max(4, 100 %) = 6.
//! assert_eq!((d.recommended, d.corrected), (5, 5));
//! ```
//!
//! The formulas, their Go sources, and the Go quirks kept or fixed are in
//! `docs/autoscaler.md`.

#[cfg(feature = "api")]
mod api;
mod behavior;
mod disagg;
mod hetero;
mod histogram;
mod ratio;
mod recommend;
mod sample;
mod scaler;
mod window;
pub mod zero;

#[cfg(feature = "api")]
pub use api::{
    behavior_from_api, metric_targets, optimizer_from_api, ratio_from_api, roles_scaler_from_api,
    tolerance_from_api,
};
pub use behavior::{Behavior, PanicPolicy, SelectPolicy, StablePolicy};
pub use disagg::{RoleDecision, RoleObservation, RoleParam, RoleRatio, RolesDecision, RolesScaler};
pub use hetero::{
    Block, Distribution, Optimizer, TargetObservation, TargetParam, aggregate_external,
    is_ratio_metric, scaling_order,
};
pub use histogram::{
    HISTOGRAM_DELTA_WINDOW, HISTOGRAM_RETENTION, Histogram, PodHistograms, quantile_in_diff,
};
pub use ratio::{Bounds, Enforced, Ratio, RatioBounds, enforce_role_ratio, format_go_float};
pub use recommend::{
    MAX_RECOMMENDATION, Metrics, Observation, ceil_replicas, pod_metric, recommend,
};
pub use sample::{InvalidSample, MAX_SAMPLE, check_sample, is_usable};
pub use scaler::{Decision, Mode, Scaler};
pub use window::{Best, LineChartWindow, RecordWindow, SnapshotWindow};
pub use zero::{Blocked, Idleness, RouterAnswer, RouterSample, Routers, ZeroStep, ZeroView, plan};

/// Errors of this crate.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two histogram snapshots cannot be subtracted, or a percentile is out of range.
    #[error("histogram quantile: {0}")]
    Histogram(&'static str),
    /// A ratio bound is not a finite non-negative number.
    #[error("invalid ratio {0:?}: must be a finite number ≥ 0")]
    InvalidRatio(String),
    /// A ratio constraint names a role the policy does not scale.
    #[error("ratio constraint role {0:?} is not a role of the target")]
    UnknownRole(String),
    /// A duration field of the policy cannot be parsed, with its JSON path (e.g.
    /// `spec.behavior.scaleDown.period`).
    #[cfg(feature = "api")]
    #[error("{path}: {source}")]
    InvalidDuration {
        /// JSON path of the field.
        path: String,
        /// Why the text is not a duration.
        #[source]
        source: kthena_api::DurationError,
    },
    /// A quantity field of the policy is not a Kubernetes quantity, with its JSON path (e.g.
    /// `spec.metrics[0].targetValue`).
    #[error("{path}: not a quantity")]
    InvalidQuantity {
        /// JSON path of the field.
        path: String,
    },
    /// A ratio bound of the policy is not a finite number ≥ 0 (below 1.8e19), with its JSON
    /// path (e.g. `spec.disaggregatedTarget.ratioConstraint.minRatio`).
    #[error("{path}: {source}")]
    InvalidBound {
        /// JSON path of the field.
        path: String,
        /// The ratio error ([`Error::InvalidRatio`]).
        #[source]
        source: Box<Self>,
    },
    /// The policy has no target of the kind asked for.
    #[error("the policy has no {0}")]
    MissingTarget(&'static str),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Go's `min(max(v, lo), hi)`: `hi` wins when `lo > hi`.
pub(crate) fn clamp(v: i32, lo: i32, hi: i32) -> i32 {
    v.max(lo).min(hi)
}
