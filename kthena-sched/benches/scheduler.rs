//! Scheduler throughput: the default plugin chain at 8/64/256 endpoints with 1k- and
//! 8k-token prompts, the prefix-cache store, and the KV index.
//!
//! `cargo bench -p kthena-sched --bench scheduler -- --warm-up-time 1 --measurement-time 2`

#![allow(clippy::unwrap_used, reason = "benchmark setup")]
#![allow(missing_docs, reason = "criterion macros generate undocumented items")]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kthena_sched::{
    Candidate, Config, InMemoryKvIndex, KvEvent, KvIndex, KvQuery, Metrics, PrefixStore, Request,
    Scheduler, prefix_block_hashes, token_block_hashes,
};

/// Bytes per token of English text (Go Kthena's estimate: ceil(chars / 4)).
const BYTES_PER_TOKEN: usize = 4;

fn endpoints(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| {
            Candidate::new(format!("default/qwen3-{i:04}"), "qwen3").with_metrics(Metrics {
                in_flight: (i * 7 % 13) as u32,
                running_requests: (i * 5 % 11) as u32,
                waiting_requests: (i % 4) as u32,
                kv_cache_usage: (i % 10) as f64 / 10.0,
                ttft_ms: Some(100.0 + (i % 17) as f64 * 10.0),
                tpot_ms: Some(10.0 + (i % 7) as f64),
                awaiting_first_token: (i % 3) as u32,
                pending_prefill_tokens: (i % 3 * 2048) as u64,
            })
        })
        .collect()
}

/// A prompt of `tokens` tokens for prefix group `group`: a shared system prompt of a quarter
/// of the length, then a per-request question.
fn prompt(tokens: usize, group: usize, req: usize) -> String {
    let bytes = tokens * BYTES_PER_TOKEN;
    let sys_len = bytes / 4;
    let mut s: String = format!("[system prompt of group {group}] ")
        .chars()
        .cycle()
        .take(sys_len)
        .collect();
    s.extend(
        format!("(question {req}) ")
            .chars()
            .cycle()
            .take(bytes - sys_len),
    );
    s
}

fn scheduler_with_history(yaml: Option<&str>, cands: &[Candidate], tokens: usize) -> Scheduler {
    let cfg = yaml.map_or_else(Config::default, |y| Config::from_yaml(y).unwrap());
    let s = Scheduler::builder(cfg).build().unwrap();
    // Warm the prefix store: 32 groups × 8 requests, spread over the endpoints.
    for g in 0..32 {
        for r in 0..8 {
            let p = prompt(tokens, g, r);
            s.on_scheduled(
                &Request::new("qwen3").with_prompt(&p),
                &cands[(g * 3 + r) % cands.len()],
            );
        }
    }
    s
}

fn chain(c: &mut Criterion) {
    let mut g = c.benchmark_group("chain");
    for &n in &[8usize, 64, 256] {
        let cands = endpoints(n);
        for &tokens in &[1024usize, 8192] {
            let p = prompt(tokens, 5, 1_000);
            let req = Request::new("qwen3").with_prompt(&p);
            let label = format!("{n}ep/{}k", tokens / 1024);
            let default = scheduler_with_history(None, &cands, tokens);
            g.bench_function(BenchmarkId::new("default", &label), |b| {
                b.iter(|| {
                    default
                        .schedule(black_box(&req), black_box(&cands))
                        .unwrap()
                });
            });
            let random = scheduler_with_history(
                Some("plugins: {Score: {enabled: [{name: random}]}}"),
                &cands,
                tokens,
            );
            g.bench_function(BenchmarkId::new("random-baseline", &label), |b| {
                b.iter(|| random.schedule(black_box(&req), black_box(&cands)).unwrap());
            });
        }
    }
    // kvcache-aware with token ids (16-token blocks, 128 blocks max).
    for &n in &[8usize, 64, 256] {
        let cands = endpoints(n);
        let s = Scheduler::from_config(
            &Config::from_yaml(
                "plugins: {Filter: {enabled: [least-request, load-imbalance]}, Score: {enabled: [{name: least-request}, {name: kvcache-aware}]}}",
            )
            .unwrap(),
        )
        .unwrap();
        let idx = s.kv_index().unwrap();
        let tokens: Vec<u32> = (0..8192u32)
            .map(|t| t.wrapping_mul(2_654_435_761) % 151_000)
            .collect();
        for (i, c) in cands.iter().enumerate() {
            let blocks = 1 + i % 64;
            idx.apply(
                &c.id,
                &KvEvent::BlockStored {
                    block_hashes: (0..blocks as u64).map(|b| b + 1000 * i as u64).collect(),
                    parent_block_hash: None,
                    token_ids: tokens[..blocks * 16].to_vec(),
                    block_size: 16,
                },
            )
            .unwrap();
        }
        for &t in &[1024usize, 8192] {
            let req = Request::new("qwen3").with_token_ids(&tokens[..t]);
            g.bench_function(
                BenchmarkId::new("kvcache-aware", format!("{n}ep/{}k", t / 1024)),
                |b| {
                    b.iter(|| s.schedule(black_box(&req), black_box(&cands)).unwrap());
                },
            );
        }
    }
    g.finish();
}

fn hashing(c: &mut Criterion) {
    let mut g = c.benchmark_group("hash");
    let p = prompt(8192, 1, 1);
    let tokens: Vec<u32> = (0..2048).collect();
    let mut out = Vec::new();
    g.bench_function("prefix_block_hashes/128x64B", |b| {
        b.iter(|| prefix_block_hashes("qwen3", black_box(p.as_bytes()), 64, 128, &mut out));
    });
    g.bench_function("token_block_hashes/128x16", |b| {
        b.iter(|| token_block_hashes(black_box(&tokens), 16, 128, &mut out));
    });
    g.finish();
}

fn prefix_store(c: &mut Criterion) {
    let mut g = c.benchmark_group("prefix-index");
    let cands = endpoints(64);
    let refs: Vec<&Candidate> = cands.iter().collect();
    let store = PrefixStore::new(50_000);
    let mut hashes = Vec::new();
    for grp in 0..64 {
        for r in 0..16 {
            prefix_block_hashes(
                "qwen3",
                prompt(2048, grp, r).as_bytes(),
                64,
                128,
                &mut hashes,
            );
            store.insert(&cands[(grp + r) % 64].id, &hashes);
        }
    }
    prefix_block_hashes(
        "qwen3",
        prompt(2048, 7, 99).as_bytes(),
        64,
        128,
        &mut hashes,
    );
    let mut i = 0usize;
    g.bench_function("insert/128-blocks", |b| {
        b.iter(|| {
            i += 1;
            store.insert(&cands[i % 64].id, black_box(&hashes));
        });
    });
    let mut out = vec![0u32; refs.len()];
    g.bench_function("match/128-blocks/64ep", |b| {
        b.iter(|| store.find_top_matches(black_box(&hashes), &refs, 5, &mut out));
    });
    g.finish();
}

fn kv_index(c: &mut Criterion) {
    let mut g = c.benchmark_group("kv-index");
    let cands = endpoints(64);
    let refs: Vec<&Candidate> = cands.iter().collect();
    let idx = Arc::new(InMemoryKvIndex::new(16, 1 << 20).unwrap());
    let tokens: Vec<u32> = (0..2048u32)
        .map(|t| t.wrapping_mul(40_503) % 151_000)
        .collect();
    for (i, c) in cands.iter().enumerate() {
        idx.apply(
            &c.id,
            &KvEvent::BlockStored {
                block_hashes: (0..128u64).map(|b| b + 10_000 * i as u64).collect(),
                parent_block_hash: None,
                token_ids: tokens.clone(),
                block_size: 16,
            },
        )
        .unwrap();
    }
    // One BlockStored of 1 block (vLLM emits one per newly full block), chained to a parent.
    let mut next = 1u64 << 40;
    let ep = cands[3].id.clone();
    idx.apply(
        &ep,
        &KvEvent::BlockStored {
            block_hashes: vec![next],
            parent_block_hash: None,
            token_ids: tokens[..16].to_vec(),
            block_size: 16,
        },
    )
    .unwrap();
    let block: Vec<u32> = tokens[16..32].to_vec();
    g.bench_function("apply/BlockStored-1-block", |b| {
        b.iter(|| {
            let ev = KvEvent::BlockStored {
                block_hashes: vec![next + 1],
                parent_block_hash: Some(next),
                token_ids: block.clone(),
                block_size: 16,
            };
            next += 1;
            idx.apply(&ep, black_box(&ev)).unwrap();
        });
    });
    let mut hashes = Vec::new();
    token_block_hashes(&tokens, 16, 128, &mut hashes);
    let mut out = vec![0u32; refs.len()];
    g.bench_function("match/128-blocks/64ep", |b| {
        b.iter(|| {
            let q = KvQuery {
                model: "qwen3",
                token_ids: &tokens,
                block_size: 16,
                block_hashes: black_box(&hashes),
            };
            idx.match_prefix(&q, &refs, &mut out);
        });
    });
    g.finish();
}

criterion_group!(benches, chain, hashing, prefix_store, kv_index);
criterion_main!(benches);
