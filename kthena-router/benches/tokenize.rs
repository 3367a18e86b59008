//! Prompt tokenization with the Qwen3 tokenizer: a chat request whose system prompt is about
//! 8k tokens, tokenized cold (no prefix cache) and warm (the system prompt cached, a new user
//! question each time).
//!
//! `cargo bench -p kthena-router --bench tokenize -- --warm-up-time 1 --measurement-time 2`

#![allow(clippy::unwrap_used, reason = "benchmark setup")]

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use kthena_openai::Message;
use kthena_router::tokenize::{CacheOutcome, ModelTokenizer};

fn qwen3_dir() -> PathBuf {
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/tokenizers/qwen3")
    }
}

/// A system prompt of about `tokens` Qwen3 tokens (varied English text).
fn system_prompt(tok: &ModelTokenizer, tokens: usize) -> String {
    let words = [
        "policy", "customer", "refund", "shipping", "warranty", "invoice", "account", "support",
        "escalate", "priority", "response", "template", "greeting", "apology", "tracking", "order",
    ];
    let mut s = String::from("You are the support assistant of an online store. Rules:\n");
    let mut i = 0usize;
    while tok.encode_uncached(&s, false).unwrap().len() < tokens {
        for _ in 0..20 {
            s.push_str(&format!(
                "{} {} rule {}; ",
                words[i % words.len()],
                words[(i * 7 + 3) % words.len()],
                i
            ));
            i += 1;
        }
        s.push('\n');
    }
    s
}

fn bench(c: &mut Criterion) {
    let dir = qwen3_dir();
    let tok = ModelTokenizer::load(
        "qwen3",
        &dir.join("tokenizer.json"),
        Some(&dir.join("tokenizer_config.json")),
        256,
    )
    .unwrap();
    let system = system_prompt(&tok, 8000);
    let msgs = |q: u64| {
        vec![
            Message {
                role: "system".into(),
                content: system.clone(),
            },
            Message {
                role: "user".into(),
                content: format!("Where is my order number {q}?"),
            },
        ]
    };
    let text0 = tok.render_chat(&msgs(0)).unwrap();
    let n = tok.encode_uncached(&text0, false).unwrap().len();
    eprintln!("prompt: {n} tokens, {} bytes", text0.len());
    let mut g = c.benchmark_group("tokenize_8k_system_prompt");
    g.sample_size(10);
    g.bench_function("cold", |b| {
        let mut q = 0u64;
        b.iter(|| {
            q += 1;
            let text = tok.render_chat(&msgs(q)).unwrap();
            black_box(tok.encode_uncached(&text, false).unwrap())
        });
    });
    // Warm the cache with one request, then every iteration asks a new question.
    let (_, first) = tok.encode(&text0, false).unwrap();
    assert_eq!(first, CacheOutcome::Miss);
    g.bench_function("warm", |b| {
        let mut q = 1_000_000u64;
        b.iter(|| {
            q += 1;
            let text = tok.render_chat(&msgs(q)).unwrap();
            let (ids, outcome) = tok.encode(&text, false).unwrap();
            assert!(matches!(outcome, CacheOutcome::Hit { .. }));
            black_box(ids)
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
