//! Kinds of the `workload.serving.volcano.sh/v1alpha1` group: [`ModelServing`],
//! [`ModelBooster`] and [`AutoscalingPolicy`].
//!
//! Field names, enums and defaults follow Go Kthena's `pkg/apis/workload/v1alpha1/*_types.go`
//! and the CRDs generated from them (the v1.0 AutoscalingPolicy shape with
//! `homogeneousTarget` / `heterogeneousTarget` / `disaggregatedTarget`).

mod autoscaling;
mod booster;
mod serving;

pub use autoscaling::*;
pub use booster::*;
pub use serving::*;

/// API group of the workload kinds.
pub const GROUP: &str = "workload.serving.volcano.sh";
/// `apiVersion` of the workload kinds.
pub const API_VERSION: &str = "workload.serving.volcano.sh/v1alpha1";
