#![no_main]
//! libFuzzer target: [`kthena_fuzz::kv_events`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::kv_events(data));
