//! Heap allocations of the SSE path per streamed chunk, counted with dhat's allocator: none
//! in steady state (token chunks, with or without `"usage":null`), and the final usage chunk
//! still read and hidden.
#![allow(clippy::unwrap_used, reason = "a test aborts on any setup error")]

use bytes::{Bytes, BytesMut};
use kthena_openai::SseFilter;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// `n` vLLM chat token events, then the usage chunk and `[DONE]`, as one text.
fn stream(n: usize, usage_null: bool) -> String {
    let usage = if usage_null { ",\"usage\":null" } else { "" };
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
             \"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}\"}},\
             \"logprobs\":null,\"finish_reason\":null}}]{usage}}}\n\n"
        ));
    }
    s.push_str(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
         \"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":9}}\n\n\
         data: [DONE]\n\n",
    );
    s
}

/// The text cut into one read per event, as slices of one shared buffer (as hyper hands
/// them over).
fn reads(text: &str) -> Vec<Bytes> {
    let mut buf = BytesMut::from(text.as_bytes());
    let mut out = Vec::new();
    while let Some(at) = memchr_event_end(&buf) {
        out.push(buf.split_to(at).freeze());
    }
    out
}

fn memchr_event_end(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

fn blocks() -> u64 {
    dhat::HeapStats::get().total_blocks
}

#[test]
fn a_streamed_chunk_allocates_nothing_in_steady_state() {
    let _profiler = dhat::Profiler::builder().testing().build();
    for usage_null in [false, true] {
        let chunks = reads(&stream(1_000, usage_null));
        let (tokens, tail) = chunks.split_at(1_000);
        let (tokens, tail) = (tokens.to_vec(), tail.to_vec());
        let mut f = SseFilter::new(true);
        let mut sent = 0usize;
        let before = blocks();
        for c in tokens {
            let out = f.push(c);
            sent += out.len();
        }
        let allocated = blocks() - before;
        assert_eq!(
            allocated, 0,
            "allocations over 1000 token chunks (usage null: {usage_null})"
        );
        assert!(sent > 100_000, "forwarded {sent} bytes");
        let mut rest = Vec::new();
        for c in tail {
            rest.extend_from_slice(&f.push(c));
        }
        assert_eq!(&rest[..], b"data: [DONE]\n\n", "usage chunk hidden");
        assert_eq!(f.output_tokens, 9);
        assert!(f.saw_done);
    }
}
