#![no_main]
//! libFuzzer target: [`kthena_fuzz::router_config`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::router_config(data));
