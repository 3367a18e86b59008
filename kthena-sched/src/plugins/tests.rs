use super::*;
use crate::{Candidate, EndpointId, Metrics, Request};
use crate::{FilterPlugin, ScorePlugin};

fn cand(id: &str, m: Metrics) -> Candidate {
    Candidate::new(id, "m").with_metrics(m)
}

fn scores(p: &dyn ScorePlugin, req: &Request<'_>, cands: &[Candidate]) -> Vec<f64> {
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = vec![0.0; refs.len()];
    p.score(req, &refs, &mut out);
    out
}

fn kept(p: &dyn FilterPlugin, req: &Request<'_>, cands: &[Candidate]) -> Vec<bool> {
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut keep = vec![true; refs.len()];
    p.filter(req, &refs, &mut keep);
    keep
}

fn load(in_flight: u32, running: u32, waiting: u32) -> Metrics {
    Metrics {
        in_flight,
        running_requests: running,
        waiting_requests: waiting,
        ..Metrics::default()
    }
}

#[test]
fn least_request_score_formula() {
    let p = LeastRequest::new(LeastRequestArgs::default()).unwrap();
    let cands = [
        cand("a", load(0, 0, 0)), // base 0
        cand("b", load(2, 1, 0)), // base 2 + 100*1 = 102
        cand("c", load(5, 5, 0)), // base 5
        cand("d", load(3, 0, 0)), // base 3 + 300 = 303
    ];
    // trunc((303 - base) / 303 * 100)
    assert_eq!(
        scores(&p, &Request::new("m"), &cands),
        vec![100.0, 66.0, 98.0, 0.0]
    );
}

#[test]
fn least_request_all_idle_scores_100() {
    let p = LeastRequest::new(LeastRequestArgs::default()).unwrap();
    let cands = [cand("a", load(0, 0, 0)), cand("b", load(0, 7, 3))];
    assert_eq!(scores(&p, &Request::new("m"), &cands), vec![100.0, 100.0]);
}

#[test]
fn least_request_filter_uses_waiting() {
    let p = LeastRequest::new(LeastRequestArgs::default()).unwrap();
    let cands = [
        cand("a", load(50, 0, 9)),
        cand("b", load(0, 0, 10)),
        cand("c", load(0, 0, 11)),
    ];
    assert_eq!(
        kept(&p, &Request::new("m"), &cands),
        vec![true, false, false]
    );
}

fn lat(ttft: Option<f64>, tpot: Option<f64>) -> Metrics {
    Metrics {
        ttft_ms: ttft,
        tpot_ms: tpot,
        ..Metrics::default()
    }
}

#[test]
fn least_latency_formula_and_unknown_pods() {
    let p = LeastLatency::new(LeastLatencyArgs::default()).unwrap();
    let cands = [
        cand("a", lat(Some(100.0), Some(10.0))),
        cand("b", lat(Some(300.0), Some(30.0))),
        cand("c", lat(Some(200.0), Some(10.0))),
        cand("d", lat(None, None)),
        cand("e", lat(Some(0.0), Some(5.0))), // TTFT <= 0: unknown, never "fastest"
        cand("f", lat(Some(50.0), None)),
    ];
    // c: 0.5 * 100*(300-200)/(300-100) + 0.5 * 100 = 75
    assert_eq!(
        scores(&p, &Request::new("m"), &cands),
        vec![100.0, 0.0, 75.0, 50.0, 50.0, 50.0]
    );
    let p = LeastLatency::new(LeastLatencyArgs {
        ttft_tpot_weight_factor: 0.2,
    })
    .unwrap();
    // c: 0.2 * 50 + 0.8 * 100 = 90
    assert_eq!(scores(&p, &Request::new("m"), &cands)[2], 90.0);
}

#[test]
fn least_latency_single_known_pod_scores_100() {
    let p = LeastLatency::new(LeastLatencyArgs::default()).unwrap();
    let cands = [
        cand("a", lat(Some(10.0), Some(1.0))),
        cand("b", lat(None, Some(1.0))),
    ];
    assert_eq!(scores(&p, &Request::new("m"), &cands), vec![100.0, 50.0]);
}

#[test]
fn least_latency_rejects_bad_alpha() {
    for a in [1.5, -0.1, f64::NAN] {
        let e = LeastLatency::new(LeastLatencyArgs {
            ttft_tpot_weight_factor: a,
        })
        .unwrap_err();
        assert!(e.to_string().contains("TTFTTPOTWeightFactor"), "{e}");
    }
}

#[test]
fn gpu_usage_formula() {
    let usage = |u: f64| Metrics {
        kv_cache_usage: u,
        ..Metrics::default()
    };
    let cands = [
        cand("a", usage(0.25)),
        cand("b", usage(0.5)),
        cand("c", usage(0.999)),
        cand("d", usage(1.2)),
        cand("e", usage(-0.5)),
        cand("f", usage(f64::NAN)),
        cand("g", usage(0.0)),
    ];
    assert_eq!(
        scores(&GpuUsage, &Request::new("m"), &cands),
        vec![75.0, 50.0, 0.0, 0.0, 100.0, 0.0, 100.0]
    );
}

#[test]
fn random_is_seeded_and_in_range() {
    let cands: Vec<Candidate> = (0..50)
        .map(|i| cand(&i.to_string(), Metrics::default()))
        .collect();
    let a = scores(&Random::new(7), &Request::new("m"), &cands);
    let b = scores(&Random::new(7), &Request::new("m"), &cands);
    let c = scores(&Random::new(8), &Request::new("m"), &cands);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(
        a.iter()
            .all(|s| s.fract() == 0.0 && (0.0..=100.0).contains(s))
    );
}

#[test]
fn lora_affinity_keeps_endpoints_serving_the_target() {
    let cands = [
        Candidate::new("a", "base").with_lora_adapters(["sql"]),
        Candidate::new("b", "base"),
        Candidate::new("c", "other").with_lora_adapters(["sql", "chat"]),
    ];
    let req = Request::new("base").with_lora("sql");
    assert_eq!(kept(&LoraAffinity, &req, &cands), vec![true, false, true]);
    assert_eq!(
        kept(&LoraAffinityByName, &req, &cands),
        vec![true, false, true]
    );
    // A base request for an alias (`qwen`, engines serve `base`): never filtered by
    // `lora-affinity`; Go's by-name comparison keeps only endpoints listing the name.
    let alias = Request::new("qwen");
    assert_eq!(kept(&LoraAffinity, &alias, &cands), vec![true, true, true]);
    assert_eq!(
        kept(&LoraAffinityByName, &alias, &cands),
        vec![false, false, false]
    );
    assert_eq!(
        kept(&LoraAffinityByName, &Request::new("base"), &cands),
        vec![true, true, false]
    );
    // An adapter name used as a base model id does not count as the adapter.
    let only_base = [Candidate::new("d", "sql")];
    assert_eq!(kept(&LoraAffinity, &req, &only_base), vec![false]);
}

#[test]
fn prefix_store_counts_evictions_per_model() {
    let store = PrefixStore::new(2);
    let ep = EndpointId::new("a");
    store.insert_for_model(&ep, "m1", &[1, 2]);
    assert_eq!(store.evictions(), vec![("m1".to_owned(), 0)]);
    store.insert_for_model(&ep, "m2", &[3]);
    // Capacity 2: inserting 3 evicted the least recently used hash (2, of m1).
    assert_eq!(
        store.evictions(),
        vec![("m1".to_owned(), 1), ("m2".to_owned(), 0)]
    );
    assert_eq!(store.len(), 2);
    store.remove(&ep);
    assert_eq!(store.len(), 0);
    assert_eq!(store.evictions()[0].1, 1);
}

fn pc(block: usize, cap: usize, top_k: usize) -> PrefixCache {
    PrefixCache::new(PrefixCacheArgs {
        block_size_to_hash: block,
        max_blocks_to_match: 128,
        max_hash_cache_size: cap,
        top_k_matches: top_k,
    })
    .unwrap()
}

#[test]
fn prefix_cache_scores_match_ratio() {
    let p = pc(4, 100, 5);
    let cands = [
        cand("a", Metrics::default()),
        cand("b", Metrics::default()),
        cand("c", Metrics::default()),
    ];
    let full = Request::new("m").with_prompt("0123456789abcdef"); // 4 blocks
    p.on_scheduled(&full, &cands[0]);
    p.on_scheduled(&Request::new("m").with_prompt("01234567zzzz"), &cands[1]);
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = vec![0.0; 3];
    let note = p.score(&full, &refs, &mut out);
    assert_eq!(out, vec![100.0, 50.0, 0.0]);
    assert_eq!(note.match_ratio, Some(1.0));
    // A 3-block prompt sharing 1 block with b only: trunc(1/3 * 100) = 33.
    let note = p.score(
        &Request::new("m").with_prompt("0123xxxxyyyy"),
        &refs,
        &mut out,
    );
    assert_eq!(out, vec![33.0, 33.0, 0.0]);
    assert_eq!(note.match_ratio, Some(1.0 / 3.0));
    // Another model never matches: the model seeds the chain.
    p.score(
        &Request::new("other").with_prompt("0123456789abcdef"),
        &refs,
        &mut out,
    );
    assert_eq!(out, vec![0.0, 0.0, 0.0]);
}

#[test]
fn prefix_cache_empty_prompt_scores_zero() {
    let p = pc(4, 100, 5);
    let cands = [cand("a", Metrics::default())];
    p.on_scheduled(&Request::new("m"), &cands[0]);
    assert_eq!(p.store().len(), 0);
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = vec![7.0];
    let note = p.score(&Request::new("m"), &refs, &mut out);
    assert_eq!(out, vec![0.0]);
    assert_eq!(note.match_ratio, None);
}

#[test]
fn prefix_cache_top_k_stops_after_k_matches() {
    let p = pc(4, 100, 1);
    let cands = [cand("a", Metrics::default()), cand("b", Metrics::default())];
    let full = Request::new("m").with_prompt("0123456789abcdef");
    p.on_scheduled(&full, &cands[0]);
    p.on_scheduled(&Request::new("m").with_prompt("01234567"), &cands[1]);
    assert_eq!(scores(&p, &full, &cands), vec![100.0, 0.0]);
}

#[test]
fn prefix_cache_lru_keeps_shorter_prefixes() {
    // Capacity 2: inserting 4 hashes last-to-first keeps blocks 0 and 1.
    let p = pc(4, 2, 5);
    let cands = [cand("a", Metrics::default())];
    let full = Request::new("m").with_prompt("0123456789abcdef");
    p.on_scheduled(&full, &cands[0]);
    assert_eq!(p.store().len_of(&"a".into()), 2);
    assert_eq!(scores(&p, &full, &cands), vec![50.0]);
}

#[test]
fn prefix_cache_forgets_removed_endpoint() {
    let p = pc(4, 100, 5);
    let cands = [cand("a", Metrics::default())];
    let full = Request::new("m").with_prompt("0123456789abcdef");
    p.on_scheduled(&full, &cands[0]);
    p.on_endpoint_removed(&"a".into());
    assert_eq!(p.store().len(), 0);
    assert_eq!(scores(&p, &full, &cands), vec![0.0]);
}

#[test]
fn prefix_cache_rejects_zero_args() {
    let e = PrefixCache::new(PrefixCacheArgs {
        top_k_matches: 0,
        ..PrefixCacheArgs::default()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid args for scheduler plugin \"prefix-cache\": topKMatches must be > 0"
    );
}

#[test]
fn load_imbalance_keeps_least_loaded_only_when_imbalanced() {
    let p = LoadImbalance::new(LoadImbalanceArgs::default()).unwrap();
    let req = Request::new("m");
    let with = |loads: &[u32]| -> Vec<Candidate> {
        loads
            .iter()
            .enumerate()
            .map(|(i, l)| cand(&i.to_string(), load(*l, 0, 0)))
            .collect()
    };
    // 40 - 0 > 32 and 40 > 1.1 * 0.
    assert_eq!(
        kept(&p, &req, &with(&[0, 40, 10, 0])),
        vec![true, false, false, true]
    );
    // 30 is not > 32.
    assert_eq!(kept(&p, &req, &with(&[10, 40])), vec![true, true]);
    // 33 > 32 and 333 > 330.
    assert_eq!(kept(&p, &req, &with(&[300, 333])), vec![true, false]);
    // 33 > 32 but 433 is not > 1.1 * 400 = 440.
    assert_eq!(kept(&p, &req, &with(&[400, 433])), vec![true, true]);
    // Engine queues count too: load = max(in_flight, running + waiting).
    let cands = [cand("a", load(0, 30, 20)), cand("b", load(1, 0, 0))];
    assert_eq!(kept(&p, &req, &cands), vec![false, true]);
}

#[test]
fn load_imbalance_ignores_already_filtered() {
    let p = LoadImbalance::new(LoadImbalanceArgs::default()).unwrap();
    let cands = [
        cand("a", load(0, 0, 0)),
        cand("b", load(40, 0, 0)),
        cand("c", load(45, 0, 0)),
    ];
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut keep = vec![false, true, true];
    p.filter(&Request::new("m"), &refs, &mut keep);
    assert_eq!(keep, vec![false, true, true]);
}

#[test]
fn load_imbalance_rejects_rel_below_one() {
    let e = LoadImbalance::new(LoadImbalanceArgs {
        balance_rel_threshold: 0.5,
        ..LoadImbalanceArgs::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("balanceRelThreshold"));
}

#[test]
fn kvcache_aware_args_validation() {
    let e = KvCacheAwareArgs {
        vllm_tokenizer_port: 70000,
        ..KvCacheAwareArgs::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("vllmTokenizerPort"), "{e}");
    let e = parse_args::<KvCacheAwareArgs>("kvcache-aware", &serde_json::json!({"blockSize": 4}))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown key `blockSize`: did you mean `blockSizeToHash`?"
    );
}

fn pending(tokens: u64) -> Metrics {
    Metrics {
        pending_prefill_tokens: tokens,
        ..Metrics::default()
    }
}

#[test]
fn least_prefill_cost_formula() {
    let idx: std::sync::Arc<dyn crate::KvIndex> =
        std::sync::Arc::new(crate::InMemoryKvIndex::new(4, 100).unwrap());
    let p = LeastPrefill::new(
        LeastPrefillArgs {
            block_size_to_hash: 4,
            ..LeastPrefillArgs::default()
        },
        idx,
    )
    .unwrap();
    let tokens: Vec<u32> = (0..10).collect();
    let req = Request::new("m").with_token_ids(&tokens);
    let cands = [cand("a", pending(0)), cand("b", pending(20))];
    // Nothing cached: cost a = 0 + 2×10 + 1 = 21, b = 20 + 20 + 1 = 41.
    assert_eq!(scores(&p, &req, &cands), vec![100.0, 100.0 * 21.0 / 41.0]);
    // b got the request (provisionally holds blocks [0..4) and [4..8)): its cost is now
    // 20 + 2×(10 − 8) + 1 = 25 against a's 21, so a still wins, by less.
    p.on_scheduled(&req, &cands[1]);
    assert_eq!(scores(&p, &req, &cands), vec![100.0, 100.0 * 21.0 / 25.0]);
    // With 10 tokens queued on b instead, b's cost (15) beats a's (21).
    let cands = [cand("a", pending(0)), cand("b", pending(10))];
    assert_eq!(scores(&p, &req, &cands), vec![100.0 * 15.0 / 21.0, 100.0]);
    // No token ids: ceil(bytes / 4) tokens, no cache: a = 2×3 + 1 = 7, b = 10 + 6 + 1 = 17.
    let req = Request::new("m").with_prompt("0123456789");
    assert_eq!(scores(&p, &req, &cands), vec![100.0, 100.0 * 7.0 / 17.0]);
}

#[test]
fn least_prefill_rejects_bad_args() {
    let idx: std::sync::Arc<dyn crate::KvIndex> =
        std::sync::Arc::new(crate::InMemoryKvIndex::new(16, 100).unwrap());
    for w in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let args = LeastPrefillArgs {
            uncached_weight: w,
            ..LeastPrefillArgs::default()
        };
        assert!(LeastPrefill::new(args, idx.clone()).is_err(), "{w}");
    }
    let args = LeastPrefillArgs {
        block_size_to_hash: 0,
        ..LeastPrefillArgs::default()
    };
    assert!(LeastPrefill::new(args, idx).is_err());
}

fn decoding(in_flight: u32, awaiting_first_token: u32, pending: u64) -> Metrics {
    Metrics {
        in_flight,
        awaiting_first_token,
        pending_prefill_tokens: pending,
        ..Metrics::default()
    }
}

#[test]
fn least_prefill_counts_decoding_requests() {
    let idx: std::sync::Arc<dyn crate::KvIndex> =
        std::sync::Arc::new(crate::InMemoryKvIndex::new(4, 100).unwrap());
    let p = LeastPrefill::new(
        LeastPrefillArgs {
            block_size_to_hash: 4,
            decoding_request_tokens: 256.0,
            ..LeastPrefillArgs::default()
        },
        std::sync::Arc::clone(&idx),
    )
    .unwrap();
    let tokens: Vec<u32> = (0..10).collect();
    let req = Request::new("m").with_token_ids(&tokens);
    // a holds 8 of the 10 tokens and has 3 requests decoding (4 in flight, 1 before its
    // first token, 6 tokens of it queued); b holds nothing and is idle.
    let cands = [cand("a", decoding(4, 1, 6)), cand("b", decoding(0, 0, 0))];
    p.on_scheduled(&req, &cands[0]);
    // a = 6 + 256×3 + 2×2 + 1 = 779, b = 0 + 0 + 2×10 + 1 = 21: b, although a holds the
    // prefix (the prefill queue alone, 6 tokens, would have kept a: 6 + 4 + 1 = 11).
    assert_eq!(scores(&p, &req, &cands), vec![100.0 * 21.0 / 779.0, 100.0]);
    // Off (the default): affinity against the prefill queue only.
    let off = LeastPrefill::new(
        LeastPrefillArgs {
            block_size_to_hash: 4,
            ..LeastPrefillArgs::default()
        },
        idx,
    )
    .unwrap();
    assert_eq!(scores(&off, &req, &cands), vec![100.0, 100.0 * 11.0 / 21.0]);
}

#[test]
fn least_prefill_rejects_bad_decoding_request_tokens() {
    let idx: std::sync::Arc<dyn crate::KvIndex> =
        std::sync::Arc::new(crate::InMemoryKvIndex::new(16, 100).unwrap());
    for d in [-1.0, f64::NAN, f64::INFINITY] {
        let args = LeastPrefillArgs {
            decoding_request_tokens: d,
            ..LeastPrefillArgs::default()
        };
        let e = LeastPrefill::new(args, idx.clone()).unwrap_err();
        assert!(e.to_string().contains("decodingRequestTokens"), "{e}");
    }
    assert_eq!(LeastPrefillArgs::default().decoding_request_tokens, 0.0);
}
