//! The integration tests of `kthena-controller`, in one binary: each module was a test
//! binary of its own. Most run on the control plane `kthena-testenv` shares between the
//! tests of this binary, each in a namespace of its own; the tests that stop the API server
//! or delete a CRD start a control plane of their own.
//!
//! Run them with `cargo test -p kthena-controller --all-features --test it` (one module:
//! append its name, e.g. `-- rollout::`).

mod apiserver_restart;
mod autoscaler;
mod autoscaler_claims;
mod autoscaler_invalid;
mod autoscaler_zero;
mod binary_shutdown;
mod bind_address;
mod booster;
mod cert_manager;
mod chart_install;
mod chart_monitoring;
mod chart_pods;
mod chart_render;
mod chart_support;
mod controller;
mod deploy;
mod examples;
mod gang;
mod go_chart;
mod laptop;
mod lws;
mod ms_support;
mod proc_support;
mod refused;
mod rollout;
mod sim_node_release;
mod takeover;
mod warning_events;
mod webhook;
