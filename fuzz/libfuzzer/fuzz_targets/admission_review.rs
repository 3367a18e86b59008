#![no_main]
//! libFuzzer target: [`kthena_fuzz::admission_review`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::admission_review(data));
