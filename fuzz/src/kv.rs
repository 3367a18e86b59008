//! ZMQ KV-event messages: frames, msgpack batches (vLLM array and map encodings, SGLang's
//! positional events with signed hashes) and their effect on the KV index.

use bytes::Bytes;
use kthena_kvevents::{decode_batch, split_frames};
use kthena_sched::{EndpointId, InMemoryKvIndex, KvIndex};

/// The index the harness writes into: 16-token blocks (the seeds use 16 and 128; other
/// sizes are rejected by the index, which is part of what is exercised), 64 entries.
const BLOCK_SIZE: usize = 16;
const MAX_ENTRIES: usize = 64;

/// Decodes `data` as one payload and applies its events to a small in-memory index, as the
/// router's KV-event ingest does (`kthena_kvevents::decode_batch`, then
/// `KvIndex::apply` per event): the index never holds more than its cap, and applies no
/// more events than the batch decoded. The same bytes are also cut into ZMQ frames at
/// positions taken from the first byte.
pub fn kv_events(data: &[u8]) {
    let index = InMemoryKvIndex::new(BLOCK_SIZE, MAX_ENTRIES).unwrap_or_else(|e| {
        panic!("a valid index size was refused: {e}");
    });
    let endpoint = EndpointId::new("fuzz");
    let events = decode_batch(data).map(|b| b.events).unwrap_or_default();
    let applied = (events.iter())
        .filter(|ev| index.apply(&endpoint, ev).is_ok())
        .count();
    assert!(
        applied <= events.len(),
        "applied {applied} of {} events",
        events.len()
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
