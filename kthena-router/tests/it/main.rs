//! The router's integration tests, one binary: each module is one area (run one with
//! `cargo test -p kthena-router --test it access_log::`). The `*_support` modules and
//! `common` hold the shared helpers. `tests/sse_alloc.rs` stays a binary of its own: it
//! installs a counting global allocator.

mod access_log;
mod access_log_escape;
mod auth;
mod binary;
mod cluster;
mod cluster_outage;
mod cluster_restart;
mod cluster_support;
mod common;
mod config_warnings;
mod configmap_reload;
mod epp;
mod fairness_labels;
mod faults_client;
mod faults_engine;
mod faults_hang;
mod faults_redis;
mod faults_state;
mod faults_support;
mod fd_budget;
mod gateway_api;
mod go_metrics;
mod http_hardening;
mod inflight_redis;
mod kv_events;
mod kv_redis;
mod kv_routing;
mod kv_support;
mod llama_cpp;
mod lora;
mod memory;
mod openai_body;
mod openai_client;
mod overload;
mod overload_10k;
mod pd;
mod pd_support;
mod providers;
mod queue;
mod ratelimit;
mod ratelimit_accounting;
mod router;
mod scheduling;
mod shutdown_signal;
mod slow_clients;
mod tokenize;
mod watch_paths;
