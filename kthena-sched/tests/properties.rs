//! Property tests of the scheduler's invariants: scores in range, filters never re-admit,
//! decisions hold only candidates, bounded indexes, removed endpoints never reappear.

#![allow(clippy::unwrap_used, reason = "test code")]

use std::sync::Arc;

use kthena_sched::{
    Candidate, Config, EndpointId, FilterPlugin, GpuUsage, InMemoryKvIndex, KvCacheAware,
    KvCacheAwareArgs, KvEvent, KvIndex, LeastLatency, LeastLatencyArgs, LeastPrefill,
    LeastPrefillArgs, LeastRequest, LeastRequestArgs, LoadImbalance, LoadImbalanceArgs,
    LoraAffinity, Metrics, PrefixCache, PrefixCacheArgs, Random, Request, Scheduler, ScorePlugin,
};
use proptest::prelude::*;

fn metrics() -> impl Strategy<Value = Metrics> {
    let lat = prop_oneof![
        Just(None),
        Just(Some(0.0)),
        Just(Some(-1.0)),
        Just(Some(f64::NAN)),
        (0.001f64..1e6).prop_map(Some),
    ];
    (
        0u32..1000,
        0u32..1000,
        0u32..30,
        prop_oneof![-1.0f64..2.0, Just(f64::NAN), Just(0.0), Just(1.0)],
        lat.clone(),
        lat,
        prop_oneof![Just(0u64), 0u64..1_000_000, Just(u64::MAX)],
    )
        .prop_map(
            |(in_flight, running, waiting, usage, ttft, tpot, pending)| Metrics {
                in_flight,
                running_requests: running,
                waiting_requests: waiting,
                kv_cache_usage: usage,
                ttft_ms: ttft,
                tpot_ms: tpot,
                awaiting_first_token: u32::from(pending > 0),
                pending_prefill_tokens: pending,
            },
        )
}

fn candidates(max: usize) -> impl Strategy<Value = Vec<Candidate>> {
    prop::collection::vec((0u8..40, metrics(), prop::bool::ANY), 1..max).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (id, m, lora))| {
                // Duplicate-looking ids are made unique by the index suffix.
                let c = Candidate::new(format!("ep-{id}-{i}"), "m").with_metrics(m);
                if lora {
                    c.with_lora_adapters(["sql"])
                } else {
                    c
                }
            })
            .collect()
    })
}

fn score_plugins() -> Vec<Box<dyn ScorePlugin>> {
    let idx: Arc<dyn KvIndex> = Arc::new(InMemoryKvIndex::new(4, 64).unwrap());
    vec![
        Box::new(LeastRequest::new(LeastRequestArgs::default()).unwrap()),
        Box::new(LeastLatency::new(LeastLatencyArgs::default()).unwrap()),
        Box::new(GpuUsage),
        Box::new(Random::new(3)),
        Box::new(
            PrefixCache::new(PrefixCacheArgs {
                block_size_to_hash: 4,
                max_hash_cache_size: 16,
                ..PrefixCacheArgs::default()
            })
            .unwrap(),
        ),
        Box::new(
            KvCacheAware::new(
                KvCacheAwareArgs {
                    block_size_to_hash: 4,
                    ..KvCacheAwareArgs::default()
                },
                idx.clone(),
            )
            .unwrap(),
        ),
        Box::new(
            LeastPrefill::new(
                LeastPrefillArgs {
                    block_size_to_hash: 4,
                    ..LeastPrefillArgs::default()
                },
                idx,
            )
            .unwrap(),
        ),
    ]
}

fn filter_plugins() -> Vec<Box<dyn FilterPlugin>> {
    vec![
        Box::new(LeastRequest::new(LeastRequestArgs::default()).unwrap()),
        Box::new(LoraAffinity),
        Box::new(LoadImbalance::new(LoadImbalanceArgs::default()).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_score_is_finite_and_in_range(
        cands in candidates(40),
        prompt in prop::collection::vec(any::<u8>(), 0..64),
        tokens in prop::collection::vec(0u32..8, 0..24),
        history in prop::collection::vec((0usize..40, prop::collection::vec(any::<u8>(), 0..64)), 0..8),
    ) {
        let refs: Vec<&Candidate> = cands.iter().collect();
        let req = Request::new("m").with_prompt_bytes(&prompt).with_token_ids(&tokens);
        for p in score_plugins() {
            for (i, past) in &history {
                p.on_scheduled(&Request::new("m").with_prompt_bytes(past), &cands[i % cands.len()]);
            }
            let mut out = vec![0.0; refs.len()];
            let note = p.score(&req, &refs, &mut out);
            for s in &out {
                prop_assert!(s.is_finite() && (0.0..=100.0).contains(s), "{} gave {s}", p.name());
            }
            if let Some(r) = note.match_ratio {
                prop_assert!((0.0..=1.0).contains(&r));
            }
        }
    }

    #[test]
    fn filters_never_readmit(
        cands in candidates(40),
        mask in prop::collection::vec(prop::bool::ANY, 40),
        lora in prop::bool::ANY,
    ) {
        let refs: Vec<&Candidate> = cands.iter().collect();
        let req = if lora { Request::new("m").with_lora("sql") } else { Request::new("m") };
        for f in filter_plugins() {
            let before = &mask[..refs.len()];
            let mut keep = before.to_vec();
            f.filter(&req, &refs, &mut keep);
            for (b, k) in before.iter().zip(&keep) {
                prop_assert!(*b || !*k, "{} re-admitted a candidate", f.name());
            }
        }
    }

    #[test]
    fn decisions_hold_only_candidates_ranked(cands in candidates(60), prompt in "[a-c]{0,300}") {
        let s = Scheduler::from_config(&Config::default()).unwrap();
        let req = Request::new("m").with_prompt(&prompt);
        match s.schedule(&req, &cands) {
            Ok(d) => {
                let n = cands.iter().filter(|c| c.metrics.waiting_requests < 10).count();
                prop_assert_eq!(d.ranked.len(), n.min(5));
                let mut seen = std::collections::HashSet::new();
                for r in &d.ranked {
                    prop_assert!(r.index < cands.len());
                    prop_assert_eq!(&cands[r.index].id, &r.id);
                    prop_assert!(cands[r.index].metrics.waiting_requests < 10);
                    prop_assert!(seen.insert(r.index));
                    prop_assert!(r.score.is_finite() && (0.0..=400.0).contains(&r.score));
                }
                for w in d.ranked.windows(2) {
                    prop_assert!(w[0].score > w[1].score || (w[0].score == w[1].score && w[0].id < w[1].id));
                }
                s.on_scheduled(&req, &cands[d.best().index]);
            }
            Err(e) => {
                prop_assert!(cands.iter().all(|c| c.metrics.waiting_requests >= 10), "{e}");
            }
        }
        prop_assert_eq!(s.score_violations(), 0);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Store {
        ep: u8,
        first: u64,
        n: usize,
        chain: bool,
        tok: u32,
    },
    Remove {
        ep: u8,
        hash: u64,
    },
    Clear {
        ep: u8,
    },
    Drop {
        ep: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, 0u64..30, 1usize..5, prop::bool::ANY, 0u32..3)
            .prop_map(|(ep, first, n, chain, tok)| Op::Store { ep, first, n, chain, tok }),
        2 => (0u8..4, 0u64..30).prop_map(|(ep, hash)| Op::Remove { ep, hash }),
        1 => (0u8..4).prop_map(|ep| Op::Clear { ep }),
        1 => (0u8..4).prop_map(|ep| Op::Drop { ep }),
    ]
}

fn ep(i: u8) -> EndpointId {
    EndpointId::from(format!("ep{i}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn kv_index_stays_within_cap_and_forgets_removed(
        cap in 1usize..24,
        ops in prop::collection::vec(op(), 1..80),
        query in prop::collection::vec(0u32..3, 0..24),
    ) {
        let idx = Arc::new(InMemoryKvIndex::new(2, cap).unwrap());
        let cands: Vec<Candidate> = (0..4).map(|i| Candidate::new(ep(i), "m")).collect();
        let refs: Vec<&Candidate> = cands.iter().collect();
        let plugin = KvCacheAware::new(
            KvCacheAwareArgs { block_size_to_hash: 2, ..KvCacheAwareArgs::default() },
            idx.clone(),
        ).unwrap();
        let mut dropped = [false; 4];
        for op in ops {
            match op {
                Op::Store { ep: e, first, n, chain, tok } => {
                    let ev = KvEvent::BlockStored {
                        block_hashes: (first..first + n as u64).collect(),
                        parent_block_hash: if chain && first > 0 { Some(first - 1) } else { None },
                        token_ids: (0..n * 2).map(|i| (i as u32 + tok) % 3).collect(),
                        block_size: 2,
                    };
                    // An unknown parent is rejected; either way the cap holds.
                    if idx.apply(&ep(e), &ev).is_ok() {
                        dropped[e as usize] = false;
                    }
                }
                Op::Remove { ep: e, hash } => {
                    idx.apply(&ep(e), &KvEvent::BlockRemoved { block_hashes: vec![hash] }).unwrap();
                }
                Op::Clear { ep: e } => idx.apply(&ep(e), &KvEvent::AllBlocksCleared).unwrap(),
                Op::Drop { ep: e } => {
                    idx.remove_endpoint(&ep(e));
                    dropped[e as usize] = true;
                }
            }
            prop_assert!(idx.len() <= cap, "{} entries > cap {cap}", idx.len());
            prop_assert!(idx.distinct_blocks() <= idx.len());
            let mut out = vec![0.0; 4];
            plugin.score(&Request::new("m").with_token_ids(&query), &refs, &mut out);
            for (i, d) in dropped.iter().enumerate() {
                if *d {
                    prop_assert_eq!(out[i], 0.0, "removed endpoint {} matched", i);
                }
            }
        }
    }

    #[test]
    fn prefix_store_stays_within_cap_and_forgets_removed(
        cap in 1usize..16,
        ops in prop::collection::vec((0u8..4, "[ab]{0,40}", prop::bool::weighted(0.15)), 1..60),
        query in "[ab]{1,40}",
    ) {
        let p = PrefixCache::new(PrefixCacheArgs {
            block_size_to_hash: 4,
            max_hash_cache_size: cap,
            ..PrefixCacheArgs::default()
        }).unwrap();
        let cands: Vec<Candidate> = (0..4).map(|i| Candidate::new(ep(i), "m")).collect();
        let refs: Vec<&Candidate> = cands.iter().collect();
        let mut dropped = [false; 4];
        for (e, prompt, remove) in ops {
            if remove {
                p.on_endpoint_removed(&ep(e));
                dropped[e as usize] = true;
            } else {
                p.on_scheduled(&Request::new("m").with_prompt(&prompt), &cands[e as usize]);
                dropped[e as usize] &= prompt.is_empty();
            }
            for i in 0..4 {
                prop_assert!(p.store().len_of(&ep(i)) <= cap);
            }
            let mut out = vec![0.0; 4];
            p.score(&Request::new("m").with_prompt(&query), &refs, &mut out);
            for (i, d) in dropped.iter().enumerate() {
                if *d {
                    prop_assert_eq!(out[i], 0.0, "removed endpoint {} matched", i);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Without eviction, the index answers exactly what a naive model of "endpoint → set of
    /// chained block hashes it stored" answers.
    #[test]
    fn kv_index_matches_reference_model(
        ops in prop::collection::vec(op(), 1..60),
        query in prop::collection::vec(0u32..3, 0..24),
    ) {
        use std::collections::HashMap;
        let idx = InMemoryKvIndex::new(2, 10_000).unwrap();
        let mut model: HashMap<u8, HashMap<u64, u64>> = HashMap::new();
        for op in ops {
            match op {
                Op::Store { ep: e, first, n, chain, tok } => {
                    let parent = if chain && first > 0 { Some(first - 1) } else { None };
                    let tokens: Vec<u32> = (0..n * 2).map(|i| (i as u32 + tok) % 3).collect();
                    let ev = KvEvent::BlockStored {
                        block_hashes: (first..first + n as u64).collect(),
                        parent_block_hash: parent,
                        token_ids: tokens.clone(),
                        block_size: 2,
                    };
                    let m = model.entry(e).or_default();
                    let known_parent = parent.map(|p| m.get(&p).copied());
                    let res = idx.apply(&ep(e), &ev);
                    if known_parent == Some(None) {
                        prop_assert!(res.is_err());
                        continue;
                    }
                    prop_assert!(res.is_ok());
                    let mut prev = known_parent.flatten();
                    for (k, block) in tokens.chunks(2).enumerate() {
                        let h = kthena_sched::token_block_hash(prev, block);
                        m.insert(first + k as u64, h);
                        prev = Some(h);
                    }
                }
                Op::Remove { ep: e, hash } => {
                    idx.apply(&ep(e), &KvEvent::BlockRemoved { block_hashes: vec![hash] }).unwrap();
                    if let Some(m) = model.get_mut(&e) { m.remove(&hash); }
                }
                Op::Clear { ep: e } => {
                    idx.apply(&ep(e), &KvEvent::AllBlocksCleared).unwrap();
                    model.remove(&e);
                }
                Op::Drop { ep: e } => {
                    idx.remove_endpoint(&ep(e));
                    model.remove(&e);
                }
            }
        }
        let cands: Vec<Candidate> = (0..4).map(|i| Candidate::new(ep(i), "m")).collect();
        let refs: Vec<&Candidate> = cands.iter().collect();
        let mut hashes = Vec::new();
        kthena_sched::token_block_hashes(&query, 2, 128, &mut hashes);
        let mut out = vec![0u32; 4];
        idx.match_prefix(
            &kthena_sched::KvQuery { model: "m", token_ids: &query, block_size: 2, block_hashes: &hashes },
            &refs,
            &mut out,
        );
        for e in 0..4u8 {
            let held: std::collections::HashSet<u64> =
                model.get(&e).map(|m| m.values().copied().collect()).unwrap_or_default();
            let expect = hashes.iter().take_while(|h| held.contains(h)).count() as u32;
            prop_assert_eq!(out[e as usize], expect, "endpoint {}", e);
        }
        prop_assert_eq!(idx.len(), model.values().map(HashMap::len).sum::<usize>());
    }
}
