//! Qwen3's real tokenizer and chat template (`shared/tokenizers/qwen3`): exact ids and token
//! counts (checked against Hugging Face's Python `tokenizers` and vLLM 0.32's `/tokenize`), the
//! prompt-prefix cache, decoding and load errors.

#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use std::path::PathBuf;
use std::sync::OnceLock;

use kthena_tokenize::{CacheOutcome, Error, MIN_CACHED_PREFIX_BYTES, Tokenizer, render_chatml};

/// `shared/tokenizers/qwen3`, found next to the checkout first.
fn qwen3_dir() -> PathBuf {
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/tokenizers/qwen3")
    }
}

fn qwen3(cache: usize) -> Tokenizer {
    Tokenizer::from_file(&qwen3_dir().join("tokenizer.json"), cache).unwrap()
}

/// One tokenizer with an 8-entry cache for the tests (loading takes seconds in debug builds).
fn shared() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| qwen3(8))
}

#[test]
fn exact_ids_and_counts() {
    let t = shared();
    // spec/samples/vllm-0.32-cpu/tokenize.json
    assert_eq!(
        t.encode_uncached("Hello, world!", true).unwrap(),
        [9707, 11, 1879, 0]
    );
    assert_eq!(t.vocab_size(), 151_669);
    assert_eq!(t.decode(&[9707, 11, 1879, 0]).unwrap(), "Hello, world!");
    let fr = "Tu es un assistant. Règles « strictes » — 日本語も話せます.";
    assert_eq!(t.encode_uncached(fr, true).unwrap().len(), 21);
    assert!(matches!(
        t.decode(&[151_669]),
        Err(Error::UnknownId {
            id: 151_669,
            vocab_size: 151_669
        })
    ));
}

#[test]
fn chat_template_renders_like_vllm() {
    let t = shared();
    assert!(t.has_chat_template());
    let msgs = [("system", "Be brief."), ("user", "Hi!")];
    let text = t.render_chat(&msgs).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
    // For this conversation Qwen3's template and ChatML agree.
    assert_eq!(text, render_chatml(&msgs));
    let (ids, outcome) = t.encode(&text, false).unwrap();
    assert_eq!(
        ids,
        [
            151_644, 8948, 198, 3430, 9814, 13, 151_645, 198, 151_644, 872, 198, 13048, 0, 151_645,
            198, 151_644, 77091, 198
        ]
    );
    assert_eq!(outcome, CacheOutcome::Miss);
    // The reasoning of an assistant turn before the last user turn is dropped, as the
    // template says.
    let owned = [
        ("user".to_owned(), "2+2?".to_owned()),
        (
            "assistant".to_owned(),
            "<think>\nadd\n</think>\n\n4".to_owned(),
        ),
        ("user".to_owned(), "3+3?".to_owned()),
    ];
    assert_eq!(
        t.render_chat(&owned).unwrap(),
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn prefix_cache_is_exact_and_hits() {
    let t = shared();
    let system = "You are a helpful assistant. ".repeat(20);
    let chat = |q: &str| {
        t.render_chat(&[("system", system.as_str()), ("user", q)])
            .unwrap()
    };
    let first = chat("Hi!");
    let (ids, outcome) = t.encode(&first, false).unwrap();
    assert_eq!((ids.len(), outcome), (136, CacheOutcome::Miss));
    let second = chat("Bye!");
    let (ids2, outcome) = t.encode(&second, false).unwrap();
    assert_eq!(ids2.len(), 137);
    assert_eq!(ids2, t.encode_uncached(&second, false).unwrap());
    assert_eq!(
        outcome,
        CacheOutcome::Hit {
            prefix_bytes: second.find("<|im_start|>user").unwrap()
        }
    );
    assert_eq!(second.find("<|im_start|>user"), Some(610));
    // With special tokens added, the cache keys differ: no hit on the chat entries.
    let (with, outcome) = t.encode(&second, true).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(with, t.encode_uncached(&second, true).unwrap());
    // Short texts and texts without special tokens are not cached.
    let plain = "x".repeat(MIN_CACHED_PREFIX_BYTES - 1);
    assert_eq!(t.encode(&plain, true).unwrap().1, CacheOutcome::Uncacheable);
    // A cache of 0 entries is off.
    assert_eq!(
        qwen3(0).encode(&second, false).unwrap(),
        (ids2, CacheOutcome::Uncacheable)
    );
}

#[test]
fn load_errors_are_typed() {
    let missing = qwen3_dir().join("no-such-tokenizer.json");
    assert!(matches!(
        Tokenizer::load(&missing, None, 4),
        Err(Error::Tokenizer { path, .. }) if path == missing
    ));
    let dir = std::env::temp_dir().join(format!("kthena-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = qwen3_dir().join("tokenizer.json");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    assert!(matches!(
        Tokenizer::load(&json, Some(&bad), 4),
        Err(Error::Config { .. })
    ));
    let broken = dir.join("broken.json");
    std::fs::write(&broken, r#"{"chat_template": "{% if %}"}"#).unwrap();
    assert!(matches!(
        Tokenizer::load(&json, Some(&broken), 4),
        Err(Error::Template(_))
    ));
    let raising = dir.join("raising.json");
    std::fs::write(
        &raising,
        r#"{"chat_template": "{{ raise_exception('no system role') }}"}"#,
    )
    .unwrap();
    let t = Tokenizer::load(&json, Some(&raising), 4).unwrap();
    let err = t.render_chat(&[("system", "x")]).unwrap_err();
    assert!(err.to_string().contains("no system role"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
