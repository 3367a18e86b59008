//! kthena-api's integration tests, one binary: each module is one area (run one with
//! `cargo test -p kthena-api --test it load::`).

mod crd_schema;
mod deploy_crds;
mod examples;
mod load;
