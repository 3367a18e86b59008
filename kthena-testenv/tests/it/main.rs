//! kthena-testenv's integration tests, one binary: each module is one area (run one with
//! `cargo test -p kthena-testenv --test it cel::`).

mod cel;
mod cluster;
mod kube_env;
mod watchdog;
