#![no_main]
//! libFuzzer target: [`kthena_fuzz::engine_metrics`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::engine_metrics(data));
