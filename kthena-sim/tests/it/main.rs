//! kthena-sim's integration tests, one binary: each module is one area (run one with
//! `cargo test -p kthena-sim --test it api::`); `common` holds the shared helpers.

mod api;
mod cli;
mod common;
mod cost_model;
mod drain;
mod kv_events;
mod memory;
mod metrics_format;
mod node;
mod node_process;
mod node_termination;
mod pd;
mod responses;
mod vllm_endpoints;
mod vllm_hashes;
mod vllm_router;
