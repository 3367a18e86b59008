#![no_main]
//! libFuzzer target: [`kthena_fuzz::openai_request`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::openai_request(data));
