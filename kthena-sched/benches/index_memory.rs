//! Heap bytes per entry of the KV index and the prefix-cache store when filled to capacity,
//! measured with dhat's counting allocator.
//!
//! `cargo bench -p kthena-sched --bench index_memory`

#![allow(clippy::unwrap_used, reason = "benchmark setup")]
#![allow(
    clippy::print_stdout,
    reason = "a benchmark that prints its measurements"
)]

use kthena_sched::{
    EndpointId, InMemoryKvIndex, KvEvent, KvIndex, PrefixStore, prefix_block_hashes,
};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn heap_bytes() -> u64 {
    dhat::HeapStats::get().curr_bytes as u64
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();

    // KV index: 64 endpoints, every endpoint storing distinct 16-token blocks until the cap
    // is reached (and 10% beyond, so eviction has run).
    let cap = 1usize << 18;
    let before = heap_bytes();
    let idx = InMemoryKvIndex::new(16, cap).unwrap();
    let eps: Vec<EndpointId> = (0..64)
        .map(|i| EndpointId::from(format!("default/qwen3-{i:04}")))
        .collect();
    let per_event = 16usize;
    let mut parent = vec![None::<u64>; eps.len()];
    let mut next = 0u64;
    let mut stored = 0usize;
    while stored < cap + cap / 10 {
        for (i, ep) in eps.iter().enumerate() {
            let hashes: Vec<u64> = (0..per_event as u64).map(|k| next + k).collect();
            let tokens: Vec<u32> = (0..(per_event * 16) as u32)
                .map(|t| t ^ (next as u32))
                .collect();
            idx.apply(
                ep,
                &KvEvent::BlockStored {
                    block_hashes: hashes,
                    parent_block_hash: parent[i],
                    token_ids: tokens,
                    block_size: 16,
                },
            )
            .unwrap();
            parent[i] = Some(next + per_event as u64 - 1);
            next += per_event as u64;
            stored += per_event;
        }
    }
    let kv_bytes = heap_bytes() - before;
    println!(
        "kv-index: {} entries (cap {cap}), {} distinct blocks, {kv_bytes} heap bytes, {:.1} bytes/entry",
        idx.len(),
        idx.distinct_blocks(),
        kv_bytes as f64 / idx.len() as f64
    );
    drop(idx);

    // Prefix store: 8 endpoints filled to maxHashCacheSize 50000 each.
    let before = heap_bytes();
    let store = PrefixStore::new(50_000);
    let mut hashes = Vec::new();
    let mut r = 0u64;
    for ep in &eps[..8] {
        while store.len_of(ep) < 50_000 {
            let prompt = format!("{r:016x}").repeat(512);
            prefix_block_hashes("qwen3", prompt.as_bytes(), 64, 128, &mut hashes);
            store.insert(ep, &hashes);
            r += 1;
        }
        // 10% beyond capacity so eviction has run.
        for _ in 0..40 {
            let prompt = format!("{r:016x}").repeat(512);
            prefix_block_hashes("qwen3", prompt.as_bytes(), 64, 128, &mut hashes);
            store.insert(ep, &hashes);
            r += 1;
        }
    }
    let scratch = (hashes.capacity() * 8) as u64;
    let pc_bytes = heap_bytes() - before - scratch;
    println!(
        "prefix-store: {} entries (8 endpoints × cap 50000), {pc_bytes} heap bytes, {:.1} bytes/entry",
        store.len(),
        pc_bytes as f64 / store.len() as f64
    );
}
