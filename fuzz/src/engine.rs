//! What engines answer: streamed and JSON responses, `/metrics` and `/v1/models`.

use bytes::Bytes;
use kthena_engine_metrics::{SGLANG, VLLM, family, parse_metrics, parse_models};
use kthena_openai::{ResponseProbe, SseFilter, usage_of};

/// Runs the SSE filter over `data` split into chunks at positions derived from the first
/// bytes, and once in one piece: the output, the usage read and `[DONE]` must not depend on
/// the chunking; without hiding, the filter forwards the stream byte for byte. Each line's
/// `data:` payload is also probed, and the probe must read the same usage as `usage_of` on
/// the parsed JSON.
pub fn sse_filter(data: &[u8]) {
    let (cuts, body) = data.split_at(data.len().min(4));
    for hide in [false, true] {
        let whole = run_filter(hide, body, &[]);
        let chunked = run_filter(hide, body, cuts);
        assert_eq!(
            whole, chunked,
            "the SSE filter depends on the chunking (hide={hide})"
        );
        if !hide {
            assert_eq!(
                whole.0, body,
                "the SSE filter changed a stream it should forward"
            );
        }
    }
    for line in body.split(|b| *b == b'\n') {
        let payload = line.strip_prefix(b"data:").unwrap_or(line).trim_ascii();
        probe(payload);
    }
    probe(body);
}

/// `(bytes forwarded, output tokens, saw [DONE])`.
type Filtered = (Vec<u8>, u64, bool);

fn run_filter(hide: bool, body: &[u8], cuts: &[u8]) -> Filtered {
    let mut f = SseFilter::new(hide);
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    for &c in cuts {
        let (piece, tail) = rest.split_at(rest.len().min(usize::from(c)));
        out.extend_from_slice(&f.push(Bytes::copy_from_slice(piece)));
        rest = tail;
    }
    out.extend_from_slice(&f.push(Bytes::copy_from_slice(rest)));
    out.extend_from_slice(&f.flush());
    (out, f.output_tokens, f.saw_done)
}

fn probe(payload: &[u8]) {
    let probed = ResponseProbe::parse(payload);
    let parsed = std::str::from_utf8(payload)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .filter(serde_json::Value::is_object);
    match (probed, parsed) {
        (Some(p), Some(v)) => assert_eq!(p.usage(), usage_of(&v), "probe and usage_of disagree"),
        (None, None) => {}
        (p, v) => panic!("the probe and serde_json disagree on validity: {p:?} / {v:?}"),
    }
}

/// Parses `data` as an engine's `/metrics` text with the vLLM and SGLang names (llama.cpp's
/// `llamacpp:*` families are recognised by either), reads a gauge and a histogram family out
/// of it as the autoscaler does, and parses it as a `/v1/models` body. Only a panic fails;
/// errors are the expected answer to most inputs.
pub fn engine_metrics(data: &[u8]) {
    let text = crate::text(data);
    for names in [VLLM, SGLANG] {
        let _ = parse_metrics(&text, names);
        for name in [names.waiting, names.ttft] {
            let _ = family(&text, name, Ok::<_, ()>);
        }
    }
    let _ = parse_models(data);
}
