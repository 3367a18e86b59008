#![no_main]
//! libFuzzer target: [`kthena_fuzz::tokenizer_cache`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| kthena_fuzz::tokenizer_cache(data));
