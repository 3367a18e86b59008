//! The long prompts of the prompt-cost mode and the streamed chat request that sends them.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::harness::{HttpClient, MODEL};

/// Common English words the prose is drawn from (each about one Qwen3 token with its
/// leading space).
const WORDS: [&str; 96] = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "router",
    "engine",
    "cache",
    "request",
    "prompt",
    "token",
    "model",
    "latency",
    "memory",
    "cluster",
    "server",
    "policy",
    "prefix",
    "block",
    "index",
    "score",
    "weight",
    "queue",
    "batch",
    "stream",
    "system",
    "message",
    "answer",
    "question",
    "context",
    "window",
    "session",
    "traffic",
    "replica",
    "decode",
    "prefill",
    "throughput",
    "kernel",
    "tensor",
    "layer",
    "attention",
    "sequence",
    "schedule",
    "balance",
    "network",
    "storage",
    "compute",
    "deploy",
    "measure",
    "report",
    "result",
    "value",
    "number",
];

/// Seeded prose: sentences of common words with numbers and punctuation, paragraphs cut by
/// newlines. The same seed gives the same text.
#[derive(Debug)]
pub(crate) struct Prose {
    rng: SmallRng,
}

impl Prose {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// About `tokens` Qwen3 tokens of prose, starting with a capital letter: `tokens` × 31 / 40
    /// words (a word of this prose, with its punctuation and the digits of its numbers, is
    /// 1.29 Qwen3 tokens on average).
    pub(crate) fn text(&mut self, tokens: usize) -> String {
        let words = (tokens * 31 / 40).max(1);
        let mut s = String::with_capacity(words * 7);
        let mut in_sentence = 0usize;
        for _ in 0..words {
            let word = if self.rng.random_range(0..20u8) == 0 {
                self.rng.random_range(0..10_000u32).to_string()
            } else {
                WORDS[self.rng.random_range(0..WORDS.len())].to_owned()
            };
            if in_sentence == 0 {
                let mut c = word.chars();
                if let Some(first) = c.next() {
                    s.extend(first.to_uppercase());
                    s.push_str(c.as_str());
                }
            } else {
                s.push(' ');
                s.push_str(&word);
            }
            in_sentence += 1;
            if in_sentence >= self.rng.random_range(8..24) {
                s.push_str(if self.rng.random_range(0..6u8) == 0 {
                    ".\n\n"
                } else {
                    ". "
                });
                in_sentence = 0;
            }
        }
        s.push('.');
        s
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// `system`, `user` or `assistant`.
    pub(crate) role: &'static str,
    /// The text.
    pub(crate) content: String,
}

/// The body of a streamed chat request asking for `max_tokens` tokens, with the usage chunk.
pub(crate) fn chat_body(messages: &[Message], max_tokens: usize) -> String {
    let msgs: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
        .collect();
    serde_json::json!({
        "model": MODEL,
        "messages": msgs,
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0,
    })
    .to_string()
}

/// What one streamed chat request returned.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
    /// Time from sending to the first byte of the answer body.
    pub(crate) ttfb: Duration,
    /// The answer's text (the `delta.content` of every chunk).
    pub(crate) text: String,
    /// `usage.prompt_tokens` of the usage chunk (the engine's count of the rendered prompt).
    pub(crate) prompt_tokens: usize,
}

/// Sends `body` to `{base}/v1/chat/completions` and reads the SSE answer to its end.
///
/// # Errors
/// Transport errors, a status other than 200, or an answer without `[DONE]`.
pub(crate) async fn send_chat(
    client: &HttpClient,
    base: &str,
    body: String,
) -> anyhow::Result<Reply> {
    let started = Instant::now();
    let req = http::Request::post(format!("{base}/v1/chat/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?;
    let resp = client.request(req).await?;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut reply = Reply::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut done = false;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        if buf.is_empty() && reply.ttfb.is_zero() {
            reply.ttfb = started.elapsed();
        }
        buf.extend_from_slice(data);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..pos + 2).collect();
            done |= read_event(&event, &mut reply);
        }
    }
    if status != http::StatusCode::OK || !done {
        anyhow::bail!(
            "{base} answered {status}{}: {}",
            if done { "" } else { " without [DONE]" },
            String::from_utf8_lossy(&buf)
        );
    }
    Ok(reply)
}

/// Reads one SSE event into `reply`; whether it was `[DONE]`.
fn read_event(event: &[u8], reply: &mut Reply) -> bool {
    let line = String::from_utf8_lossy(event);
    let Some(payload) = line.trim().strip_prefix("data:") else {
        return false;
    };
    let payload = payload.trim();
    if payload == "[DONE]" {
        return true;
    }
    let Ok(v) = serde_json::from_str::<serde_json::Value>(payload) else {
        return false;
    };
    if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
        reply.text.push_str(t);
    }
    if let Some(n) = v["usage"]["prompt_tokens"].as_u64() {
        reply.prompt_tokens = usize::try_from(n).unwrap_or(usize::MAX);
    }
    false
}
