//! The benchmark harness' integration tests, one binary: each module is one area (run one
//! with `cargo test -p kthena-bench --test it virtual_time::`).

mod late_router;
mod pools;
mod prompt_cost;
mod replicas;
mod virtual_time;
mod workload_report;
