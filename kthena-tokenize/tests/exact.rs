//! The fast path of Qwen2/Qwen3-shaped tokenizers gives `tokenizers`' own ids: on the vLLM
//! samples, on this repository's sources and docs (code, Markdown, YAML, Unicode), on
//! multilingual text, emoji, whitespace runs, added tokens inside text, and on random text;
//! through the prompt-prefix cache as well, for every turn of a growing conversation.

#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kthena_tokenize::{CacheOutcome, Tokenizer};
use proptest::prelude::*;

fn shared_dir() -> PathBuf {
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared")
    }
}

/// Qwen3 with the fast path, no prefix cache: `encode` is the fast path, `encode_uncached`
/// is `tokenizers`.
fn qwen3() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let t =
            Tokenizer::from_file(&shared_dir().join("tokenizers/qwen3/tokenizer.json"), 0).unwrap();
        assert!(t.has_fast_path());
        t
    })
}

/// Fast-path ids of `text` (as a rendered chat piece: no added special tokens).
fn fast(text: &str) -> Vec<u32> {
    qwen3().encode(text, false).unwrap().0
}

/// `tokenizers`' `Tokenizer::encode` itself.
fn reference(text: &str) -> Vec<u32> {
    qwen3().hf().encode(text, false).unwrap().get_ids().to_vec()
}

fn assert_exact(name: &str, text: &str) {
    let (f, r) = (fast(text), reference(text));
    if f != r {
        let at = f
            .iter()
            .zip(&r)
            .position(|(a, b)| a != b)
            .unwrap_or(f.len().min(r.len()));
        panic!(
            "{name}: ids differ at {at} (fast {:?}, tokenizers {:?}) in {} bytes",
            &f[at.saturating_sub(2)..(at + 3).min(f.len())],
            &r[at.saturating_sub(2)..(at + 3).min(r.len())],
            text.len()
        );
    }
}

#[test]
fn the_vllm_samples_and_the_repositorys_files_encode_exactly() {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [
        shared_dir().join("spec/samples/vllm-0.32-cpu"),
        shared_dir().join("spec/samples/llama.cpp"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs"),
    ] {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.path().is_file() {
                files.push(e.path());
            }
        }
    }
    files.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"));
    files.push(shared_dir().join("tokenizers/qwen3/tokenizer_config.json"));
    assert!(files.len() > 20, "{files:?}");
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        assert_exact(&f.display().to_string(), &text);
    }
}

#[test]
fn multilingual_emoji_whitespace_and_added_tokens_encode_exactly() {
    let cases = [
        "Tu es un assistant. Règles « strictes » — 日本語も話せます.",
        "Здравствуйте! Как дела? مرحبا بالعالم. שלום עולם. 你好，世界！안녕하세요.",
        "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️‍🔥 and text after.",
        "   leading and trailing   \n\n\n   \t\t \r\n \x0b\x0c end  ",
        " \n",
        "\n ",
        "  ",
        "\t",
        "\r\r\n\n",
        "a\u{a0}b\u{2003}c\u{3000}d",
        "<|im_start|>user\nHi<think>\nmaybe</think>\n\nyes<|im_end|>\n<|im_start|>assistant\n",
        "x<|im_start|><|im_end|>y <tool_call>{\"a\": 1}</tool_call> z",
        "I'm, you're, he's, we've, they'll, I'd, DON'T, It'S ''quoted'' 'tis",
        "fn main() {\n    println!(\"{}\", 1_000 + 2.5e-3);\n}\n\n// done\r\n",
        "numbers 1234567890 3.14159 -42 0x1F 1e10 12:30 2026-12-06",
        "control \u{1} \u{1f} \u{7f} bytes",
        "cafe\u{301} caf\u{e9} ﬁ ①②③ Ａｂｃ",
        "",
    ];
    for (i, c) in cases.iter().enumerate() {
        assert_exact(&format!("case {i}"), c);
    }
}

#[test]
fn a_growing_conversation_is_exact_at_every_turn_and_hits_the_previous_turn() {
    let dir = shared_dir().join("tokenizers/qwen3/tokenizer.json");
    let tok = Tokenizer::from_file(&dir, 256).unwrap();
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/router.md"))
            .unwrap();
    let mut msgs: Vec<(String, String)> = vec![("system".into(), doc)];
    for turn in 1..=24 {
        msgs.push((
            "user".into(),
            format!("Question {turn}: what does section {turn} say? Don't guess."),
        ));
        let text = tok.render_chat(&msgs).unwrap();
        let (ids, outcome) = tok.encode(&text, false).unwrap();
        assert_eq!(
            ids,
            tok.encode_uncached(&text, false).unwrap(),
            "turn {turn}"
        );
        if turn > 1 {
            // The previous prompt up to its generation prompt is cached: only the answer and
            // the new question are tokenized.
            let CacheOutcome::Hit { prefix_bytes } = outcome else {
                panic!("turn {turn}: {outcome:?}");
            };
            assert!(
                text.len() - prefix_bytes < 400,
                "turn {turn}: {} new bytes",
                text.len() - prefix_bytes
            );
        }
        msgs.push((
            "assistant".into(),
            format!("Answer {turn}: section {turn} says    it 'depends'.\n\n- a\n- b"),
        ));
    }
}

/// Characters random texts are drawn from: every ASCII class the split pattern tells apart,
/// the contraction letters, added tokens, and some non-ASCII.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::sample::select(vec![
            " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "'", "s", "t", "re", "ve", "m",
            "ll", "d", "S", "LL", "a", "Z", "word", " the", "7", "42", ".", ",", "!", "(", ")",
            "{", "}", "\"", "-", "_", "/", "\\", "\u{1}", "\u{7f}",
        ]).prop_map(str::to_owned),
        1 => proptest::sample::select(vec![
            "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|endoftext|>",
            "é", "日本", "👍", "\u{a0}", "\u{2003}", "ß", "Ω",
        ]).prop_map(str::to_owned),
        1 => "\\PC{0,4}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_text_encodes_exactly(parts in proptest::collection::vec(piece(), 0..40)) {
        let text: String = parts.concat();
        prop_assert_eq!(fast(&text), reference(&text), "{:?}", text);
    }

    #[test]
    fn any_string_encodes_exactly(text in any::<String>()) {
        prop_assert_eq!(fast(&text), reference(&text), "{:?}", text);
    }
}
