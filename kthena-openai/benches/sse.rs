//! The SSE path per streamed chunk: what the router does with each upstream body chunk of a
//! streamed completion (find event boundaries, read `usage`, hide the usage chunk it asked
//! for, hand the bytes to the client connection).
//!
//! Two contenders in the same run, on the same chunks:
//! * `before`: the line filter of kthena-router 0.1 (every `data:` line parsed as JSON, the
//!   complete lines copied into a fresh buffer, then copied again into the response frame),
//!   kept here verbatim as the baseline;
//! * `after`: [`kthena_openai::SseFilter`] as the router runs it.
//!
//! Inputs are vLLM-shaped chat chunks (from `spec/samples/vllm-0.32-cpu/chat-stream.sse`):
//! one event per read, events split across reads at 100 bytes, and 4 events per read. Each
//! iteration streams one whole completion (64 tokens, the usage chunk, `[DONE]`); criterion
//! reports time per chunk (throughput in chunks). Run with
//! `cargo bench -p kthena-openai --bench sse -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any setup error")]

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kthena_openai::SseFilter;

/// Tokens per streamed completion.
const TOKENS: usize = 64;

/// The kthena-router 0.1 SSE filter and body copy, the baseline.
mod before {
    use bytes::{Bytes, BytesMut};
    use kthena_openai::ResponseProbe;

    #[derive(Default)]
    pub(crate) struct LineFilter {
        hide_usage_chunk: bool,
        line_buf: BytesMut,
        pub(crate) output_tokens: u64,
    }

    impl LineFilter {
        pub(crate) fn new(hide_usage_chunk: bool) -> Self {
            Self {
                hide_usage_chunk,
                ..Self::default()
            }
        }

        fn push(&mut self, data: &[u8]) -> Bytes {
            self.line_buf.extend_from_slice(data);
            let Some(last_nl) = self.line_buf.iter().rposition(|b| *b == b'\n') else {
                return Bytes::new();
            };
            let complete = self.line_buf.split_to(last_nl + 1).freeze();
            let mut out = BytesMut::with_capacity(complete.len());
            let mut skip_blank = false;
            for line in complete.split_inclusive(|b| *b == b'\n') {
                let l = line.strip_suffix(b"\n").unwrap_or(line);
                let text = l.strip_suffix(b"\r").unwrap_or(l);
                if skip_blank && text.is_empty() {
                    skip_blank = false;
                    continue;
                }
                skip_blank = false;
                if let Some(payload) = text.strip_prefix(b"data:") {
                    let payload = payload.trim_ascii();
                    if payload != b"[DONE]"
                        && let Some(p) = ResponseProbe::parse(payload)
                    {
                        if let Some(u) = p.usage() {
                            self.output_tokens = u.completion_tokens;
                        }
                        if self.hide_usage_chunk && p.usage_only() {
                            skip_blank = true;
                            continue;
                        }
                    }
                }
                out.extend_from_slice(line);
            }
            out.freeze()
        }

        /// One upstream chunk as `ProxyBody` 0.1 handled it: filter, then copy into the
        /// frame sent to the client.
        pub(crate) fn chunk(&mut self, data: &Bytes) -> Option<Bytes> {
            let out = BytesMut::from(&self.push(data)[..]);
            (!out.is_empty()).then(|| out.freeze())
        }
    }
}

/// One vLLM chat chunk carrying `token`.
fn token_event(token: &str) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-b26e0f656cee4438\",\"object\":\"chat.completion.chunk\",\
         \"created\":1796038385,\"model\":\"Qwen/Qwen2.5-7B-Instruct\",\"choices\":[{{\"index\":0,\
         \"delta\":{{\"content\":\"{token}\"}},\"logprobs\":null,\"finish_reason\":null,\
         \"token_ids\":null}}]}}\n\n"
    )
}

/// The whole stream of one completion: `TOKENS` token events, the usage chunk, `[DONE]`.
fn stream_text() -> String {
    let mut s = String::new();
    for i in 0..TOKENS {
        s.push_str(&token_event(&format!(" tok{i}")));
    }
    s.push_str(
        "data: {\"id\":\"chatcmpl-b26e0f656cee4438\",\"object\":\"chat.completion.chunk\",\
         \"created\":1796038385,\"model\":\"Qwen/Qwen2.5-7B-Instruct\",\"choices\":[],\
         \"usage\":{\"prompt_tokens\":19,\"total_tokens\":83,\"completion_tokens\":64},\
         \"system_fingerprint\":\"vllm-0.32.0-21f11354\"}\n\n",
    );
    s.push_str("data: [DONE]\n\n");
    s
}

/// The stream cut into reads as hyper hands them over: slices of one shared read buffer.
fn reads(text: &str, cut: Cut) -> Vec<Bytes> {
    let mut buf = BytesMut::from(text.as_bytes());
    let mut out = Vec::new();
    match cut {
        Cut::PerEvent(n) => {
            let mut events = 0;
            let mut at = 0;
            let bytes = buf.clone().freeze();
            let mut i = 0;
            while i + 1 < bytes.len() {
                if bytes[i] == b'\n' && bytes[i + 1] == b'\n' {
                    events += 1;
                    i += 2;
                    if events % n == 0 {
                        out.push(buf.split_to(i - at).freeze());
                        at = i;
                    }
                } else {
                    i += 1;
                }
            }
            if !buf.is_empty() {
                out.push(buf.split().freeze());
            }
        }
        Cut::Bytes(n) => {
            while !buf.is_empty() {
                let k = n.min(buf.len());
                out.push(buf.split_to(k).freeze());
            }
        }
    }
    out
}

#[derive(Clone, Copy)]
enum Cut {
    /// `n` whole events per read.
    PerEvent(usize),
    /// Reads of `n` bytes, events split anywhere.
    Bytes(usize),
}

fn bench(c: &mut Criterion) {
    let text = stream_text();
    let cases = [
        ("one_event_per_read", Cut::PerEvent(1)),
        ("split_reads_100_bytes", Cut::Bytes(100)),
        ("four_events_per_read", Cut::PerEvent(4)),
    ];
    for (name, cut) in cases {
        let chunks = reads(&text, cut);
        let mut g = c.benchmark_group(format!("sse_chunk/{name}"));
        g.throughput(Throughput::Elements(chunks.len() as u64));
        g.bench_function("before", |b| {
            b.iter_batched(
                || chunks.clone(),
                |chunks| {
                    let mut f = before::LineFilter::new(true);
                    for c in &chunks {
                        black_box(f.chunk(c));
                    }
                    assert_eq!(f.output_tokens, TOKENS as u64);
                },
                BatchSize::SmallInput,
            );
        });
        g.bench_function("after", |b| {
            b.iter_batched(
                || chunks.clone(),
                |chunks| {
                    let mut f = SseFilter::new(true);
                    for c in chunks {
                        black_box(after_chunk(&mut f, c));
                    }
                    assert_eq!(f.output_tokens, TOKENS as u64);
                },
                BatchSize::SmallInput,
            );
        });
        g.finish();
    }
    // Both forward the same bytes.
    let chunks = reads(&text, Cut::Bytes(100));
    let mut a = before::LineFilter::new(true);
    let mut b = SseFilter::new(true);
    let x: Vec<u8> = chunks.iter().filter_map(|c| a.chunk(c)).flatten().collect();
    let y: Vec<u8> = chunks
        .into_iter()
        .filter_map(|c| after_chunk(&mut b, c))
        .flatten()
        .collect();
    assert_eq!(x, y);
}

/// One upstream chunk through the router's filter (its output is the response frame).
fn after_chunk(f: &mut SseFilter, c: Bytes) -> Option<Bytes> {
    let out = f.push(c);
    (!out.is_empty()).then_some(out)
}

criterion_group!(benches, bench);
criterion_main!(benches);
