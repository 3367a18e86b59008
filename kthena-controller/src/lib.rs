//! Kthena's controllers, as Go's `kthena-controller-manager`: each module is one of them,
//! with its entry point; `kthena-controller` is the binary that composes them.
//!
//! - [`serving`]: the ModelServing controller. It turns each `ModelServing` into
//!   ServingGroups of entry and worker pods with headless services, scales them at both
//!   levels and writes the status users and autoscalers read, with Go Kthena's names,
//!   labels, env and order of deletion ([`serving::run`]; with `--debug-port`,
//!   [`serving::serve_debug`] dumps what the last reconciles saw and planned).
//! - [`booster`]: the `modelbooster` controller and the children of a ModelBooster (its
//!   ModelServing, ModelServer and ModelRoute) as Go's `convert` package generates them
//!   ([`booster::run_booster`]).
//! - [`autoscaler`]: the `autoscaler` controller, scaling ModelServings on their engines'
//!   metrics with `kthena-autoscale` ([`autoscaler::run_autoscaler`], see
//!   `docs/autoscaler.md`).
//! - [`webhook`]: the TLS admission webhook server for every Kthena kind
//!   ([`webhook::serve_webhook`]; [`webhook::review`] is its pure handler).
//! - [`manager`]: what runs them together: leader election on Go's Lease
//!   ([`manager::run_leader_elected`]), `--controllers`, the health probes and the API rate
//!   limit.

pub mod autoscaler;
pub mod booster;
mod error;
pub mod manager;
mod names;
pub mod serving;
#[cfg(test)]
mod testutil;
pub mod webhook;

pub use error::{Error, Result};
pub use serving::revision::gohash::GoHashError;
