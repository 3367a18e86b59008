#![no_main]
//! libFuzzer target: [`kthena_fuzz_k8s::router_config`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz_k8s::router_config(data));
