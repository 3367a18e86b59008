#![no_main]
//! libFuzzer target: [`kthena_fuzz::tokenizer_cache`].

libfuzzer_sys::fuzz_target!(
    // Loads the tokenizer before the first timed input: on a busy machine, loading the
    // Qwen3 tokenizer.json took longer than the per-input timeout and was reported as a
    // timeout on the empty input.
    init: kthena_fuzz::tokenizer_cache(b""),
    |data: &[u8]| kthena_fuzz::tokenizer_cache(data)
);
