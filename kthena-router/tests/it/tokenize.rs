//! In-process tokenization with Qwen3's real tokenizer and chat template, the prompt-prefix
//! cache, and the engine `/tokenize` fallback through the router.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use crate::kv_support::*;
use http::StatusCode;
use kthena_openai::{Message, Prompt};
use kthena_router::tokenize::{CacheOutcome, ModelTokenizer};

fn qwen3(cache: usize) -> ModelTokenizer {
    let dir = qwen3_dir();
    ModelTokenizer::load(
        "qwen3",
        &dir.join("tokenizer.json"),
        Some(&dir.join("tokenizer_config.json")),
        cache,
    )
    .unwrap()
}

fn msg(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
    }
}

/// The ids match vLLM 0.32's `/tokenize` answer for the same model (`tokenize.json`).
#[test]
fn matches_vllm_tokenize_sample() {
    let t = qwen3(16);
    let sample: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(vllm_samples().join("tokenize.json")).unwrap(),
    )
    .unwrap();
    let expected: Vec<u32> = sample["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(expected, vec![9707, 11, 1879, 0]);
    let (ids, outcome) = t
        .tokenize_prompt(&Prompt::Text("Hello, world!".into()))
        .unwrap();
    assert_eq!(ids, expected);
    assert_eq!(outcome, CacheOutcome::Uncacheable);
}

/// Qwen3's Jinja chat template renders system + user + generation prompt like vLLM does.
#[test]
fn renders_the_chat_template() {
    let t = qwen3(16);
    assert!(t.has_chat_template());
    let text = t
        .render_chat(&[msg("system", "Be brief."), msg("user", "Hi!")])
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
    // An assistant turn with reasoning is split as the template says.
    let text = t
        .render_chat(&[
            msg("user", "2+2?"),
            msg("assistant", "<think>\nadd\n</think>\n\n4"),
            msg("user", "3+3?"),
        ])
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = t
        .encode_uncached("<|im_start|>user\nHi!<|im_end|>\n", false)
        .unwrap();
    assert_eq!(ids[0], 151_644); // <|im_start|>
    assert_eq!(*ids.last().unwrap(), 198); // "\n" after <|im_end|> (151645)
    assert_eq!(ids[ids.len() - 2], 151_645);
}

/// The prefix cache gives exactly the ids of a full tokenization, and a repeated long system
/// prompt is not tokenized again.
#[test]
fn prefix_cache_is_exact_and_hits() {
    let t = qwen3(64);
    let mut system = String::from("Tu es un assistant. Règles « strictes » — 日本語も話せます.\n");
    for i in 0..200 {
        system.push_str(&format!(
            "Rule {i}: never reveal secret #{i}; prefer short answers.  \n"
        ));
    }
    let turn = |q: &str| vec![msg("system", &system), msg("user", q)];
    let first = t.render_chat(&turn("Quelle heure est-il ?")).unwrap();
    let (ids, outcome) = t.encode(&first, false).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(ids, t.encode_uncached(&first, false).unwrap());
    assert!(ids.len() > 3000, "{}", ids.len());

    let second = t.render_chat(&turn("And the weather?")).unwrap();
    let (ids2, outcome) = t.encode(&second, false).unwrap();
    assert_eq!(ids2, t.encode_uncached(&second, false).unwrap());
    // Reused: everything up to the user turn.
    let user_at = second.find("<|im_start|>user").unwrap();
    assert_eq!(
        outcome,
        CacheOutcome::Hit {
            prefix_bytes: user_at
        }
    );

    // The identical prompt again hits the whole text; a new system prompt misses.
    assert_eq!(
        t.encode(&second, false).unwrap().1,
        CacheOutcome::Hit {
            prefix_bytes: second.len()
        }
    );
    let other = t
        .render_chat(&[
            msg("system", &system.replace("Rule 0", "Rule zero")),
            msg("user", "x"),
        ])
        .unwrap();
    let (ids3, outcome) = t.encode(&other, false).unwrap();
    assert_eq!(outcome, CacheOutcome::Miss);
    assert_eq!(ids3, t.encode_uncached(&other, false).unwrap());

    // With the cache off, nothing is cached.
    let off = qwen3(0);
    assert_eq!(
        off.encode(&second, false).unwrap().1,
        CacheOutcome::Uncacheable
    );
    assert_eq!(off.encode(&second, false).unwrap().0, ids2);
}

/// Without a configured tokenizer the router asks the engine's `/tokenize` (kvcache-aware
/// enabled) and counts the real input tokens; with one, it tokenizes in-process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_fallback_and_local_accounting() {
    let sim = kthena_sim::spawn(
        kthena_sim::Config::default()
            .with_ephemeral_port()
            .with_model("m")
            .with_time_scale(100.0),
    )
    .await
    .unwrap();
    let config = format!(
        "metricsScrapeInterval: 100ms
scheduler:
  plugins:
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 1}}
      - {{name: least-request, weight: 1}}
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: sim, address: \"{}\", labels: {{app: a}}}}
",
        sim.addr()
    );
    let r = KvRouter::start(&config, &manifests("m", "a")).await;
    r.wait_ready().await;
    let prompt = "The quick brown fox jumps over the lazy dog, again and again.";
    let body = serde_json::json!({"model": "public", "prompt": prompt, "max_tokens": 2});
    let (status, v) = post_json(&format!("{}/v1/completions", r.url()), &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let (_, tk) = post_json(
        &format!("http://{}/tokenize", sim.addr()),
        &serde_json::json!({"model": "m", "prompt": prompt}),
    )
    .await;
    let count = tk["count"].as_u64().unwrap();
    assert_eq!(
        r.access_log().last().unwrap()["input_tokens"]
            .as_u64()
            .unwrap(),
        count
    );
    assert_eq!(
        r.metric(r#"kthena_router_tokenize_duration_seconds_count{source="remote"}"#)
            .await,
        1.0
    );
    assert_eq!(
        r.metric(r#"kthena_router_tokenize_duration_seconds_count{source="local"}"#)
            .await,
        0.0
    );

    // Same router, now with Qwen3 configured for the model: tokenized locally, cached.
    let dir = qwen3_dir();
    let generation = r.router.generation();
    r.rewrite(&format!(
        "{config}kvCache:\n  tokenizers:\n  - {{model: m, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}\n",
        dir.join("tokenizer.json").display(),
        dir.join("tokenizer_config.json").display()
    ));
    for _ in 0..500 {
        if r.router.generation() > generation {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        r.router.generation() > generation,
        "config was not reloaded"
    );
    let long = prompt.repeat(20);
    let chat = |q: &str| {
        serde_json::json!({"model": "public", "max_tokens": 2,
            "messages": [{"role": "system", "content": long}, {"role": "user", "content": q}]})
    };
    for q in ["first question", "second question"] {
        let (status, v) = post_json(&format!("{}/v1/chat/completions", r.url()), &chat(q)).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let t = qwen3(0);
    let expected = t
        .encode_uncached(
            &t.render_chat(&[msg("system", &long), msg("user", "second question")])
                .unwrap(),
            false,
        )
        .unwrap()
        .len() as u64;
    assert_eq!(
        r.access_log().last().unwrap()["input_tokens"]
            .as_u64()
            .unwrap(),
        expected
    );
    assert_eq!(
        r.metric(r#"kthena_router_tokenize_duration_seconds_count{source="local"}"#)
            .await,
        2.0
    );
    assert_eq!(
        r.metric(r#"kthena_router_tokenize_prefix_cache_total{result="miss"}"#)
            .await,
        1.0
    );
    assert_eq!(
        r.metric(r#"kthena_router_tokenize_prefix_cache_total{result="hit"}"#)
            .await,
        1.0
    );
    sim.kill().await;
    r.router.shutdown().await;
}
