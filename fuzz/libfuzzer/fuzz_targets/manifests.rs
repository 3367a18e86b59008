#![no_main]
//! libFuzzer target: [`kthena_fuzz_k8s::manifests`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz_k8s::manifests(data));
