//! kthena-kvevents' integration tests, one binary: each module is one area (run one with
//! `cargo test -p kthena-kvevents --test it samples::`).

mod decode;
mod roundtrip;
mod samples;
