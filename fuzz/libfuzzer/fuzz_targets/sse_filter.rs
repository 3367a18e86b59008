#![no_main]
//! libFuzzer target: [`kthena_fuzz::sse_filter`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::sse_filter(data));
