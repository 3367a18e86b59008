//! ZMQ KV-event messages: frames, msgpack batches (vLLM array and map encodings, SGLang's
//! positional events with signed hashes) and their effect on the KV index.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use kthena_kvevents::{decode_batch, split_frames};
use kthena_router::kv::{Ingest, KvMetrics, KvSource};
use kthena_sched::{EndpointId, InMemoryKvIndex, KvIndex};

/// The index the harness writes into: 16-token blocks (the seeds use 16 and 128; other
/// sizes are rejected by the index, which is part of what is exercised), 64 entries.
const BLOCK_SIZE: usize = 16;
const MAX_ENTRIES: usize = 64;

fn metrics() -> &'static KvMetrics {
    static METRICS: OnceLock<KvMetrics> = OnceLock::new();
    METRICS
        .get_or_init(|| KvMetrics::register(&mut prometheus_client::registry::Registry::default()))
}

/// Decodes `data` as one payload and applies it to a small in-memory index: the index never
/// holds more than its cap, and applies no more events than the batch decoded. The same bytes
/// are also cut into ZMQ frames at positions taken from the first byte.
pub fn kv_events(data: &[u8]) {
    let decoded = decode_batch(data).ok();
    let index = Arc::new(
        InMemoryKvIndex::new(BLOCK_SIZE, MAX_ENTRIES).unwrap_or_else(|e| {
            panic!("a valid index size was refused: {e}");
        }),
    );
    let source = KvSource {
        endpoint: EndpointId::new("fuzz"),
        events: "tcp://127.0.0.1:1".to_owned(),
        replay: None,
    };
    let mut ingest = Ingest::new(source, index.clone() as Arc<dyn KvIndex>, metrics().clone());
    let applied = ingest.apply_payload(data);
    let decodable = decoded.as_ref().map_or(0, |b| b.events.len());
    assert!(
        applied <= decodable,
        "applied {applied} of {decodable} events"
    );
    assert!(
        index.len() <= MAX_ENTRIES,
        "the index grew past its cap: {}",
        index.len()
    );
    frames(data);
}

fn frames(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let mut frames = Vec::new();
    let mut rest = rest;
    for _ in 0..(n % 5) {
        let (len, tail) = match rest.split_first() {
            Some((&l, t)) => (usize::from(l).min(t.len()), t),
            None => (0, rest),
        };
        frames.push(Bytes::copy_from_slice(&tail[..len]));
        rest = &tail[len..];
    }
    frames.push(Bytes::copy_from_slice(rest));
    if let Ok((_, _, payload)) = split_frames(&frames) {
        let _ = decode_batch(payload);
    }
}
