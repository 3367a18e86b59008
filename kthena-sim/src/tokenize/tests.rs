use super::*;

#[test]
fn fallback_pieces_follow_the_rules() {
    assert_eq!(
        fallback_pieces("Hello, world!  tokenization"),
        vec!["Hell", "o,", " wor", "ld!", "  to", "keni", "zati", "on"]
    );
    let t = Tokenizer::fallback();
    assert_eq!(t.encode("Hello, world!", true).len(), 4);
    assert_eq!(
        t.encode("a b", false),
        vec![fallback_id("a"), fallback_id(" b")]
    );
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert!(!t.output_vocab().is_empty());
}

#[test]
fn qwen3_tokenizer_matches_vllm_sample() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3/tokenizer.json");
    let path = if path.exists() {
        path
    } else {
        Path::new("/work/shared/tokenizers/qwen3/tokenizer.json").to_path_buf()
    };
    let t = Tokenizer::from_file(&path).unwrap();
    // spec/samples/vllm-0.32-cpu/tokenize.json
    assert_eq!(t.encode("Hello, world!", true), vec![9707, 11, 1879, 0]);
    assert!(t.is_hf());
    // The model's own chat template (tokenizer_config.json next to tokenizer.json).
    assert!(t.has_chat_template());
    let msgs = [
        ("system".to_owned(), "Be brief.".to_owned()),
        ("user".to_owned(), "Hello".to_owned()),
    ];
    assert_eq!(
        t.render_chat(&msgs).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
}
