#![no_main]
//! libFuzzer target: [`kthena_fuzz::manifests`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::manifests(data));
