use std::sync::Arc;

use super::*;
use crate::Request;
use crate::ScorePlugin;
use crate::plugins::{KvCacheAware, KvCacheAwareArgs};

fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> KvEvent {
    KvEvent::BlockStored {
        block_hashes: hashes.to_vec(),
        parent_block_hash: parent,
        token_ids: tokens.to_vec(),
        block_size: 2,
    }
}

fn setup(cap: usize) -> (Arc<InMemoryKvIndex>, KvCacheAware, Vec<Candidate>) {
    let idx = Arc::new(InMemoryKvIndex::new(2, cap).unwrap());
    let args = KvCacheAwareArgs {
        block_size_to_hash: 2,
        ..KvCacheAwareArgs::default()
    };
    let plugin = KvCacheAware::new(args, idx.clone()).unwrap();
    let cands = ["a", "b", "c"]
        .iter()
        .map(|id| Candidate::new(*id, "m"))
        .collect();
    (idx, plugin, cands)
}

/// Sends a request for `tokens` to `cand` ([`ScorePlugin::on_scheduled`]) and returns what
/// ends it ([`ScorePlugin::on_completed`]).
fn route(p: &KvCacheAware, tokens: &[u32], cand: &Candidate) -> crate::Completion {
    let req = Request::new("m").with_token_ids(tokens);
    p.on_scheduled(&req, cand);
    let mut done = crate::Completion::new(&req, cand.id.clone());
    if let Some(b) = p.completion_blocks(&req) {
        done.push_blocks("kvcache-aware", b);
    }
    done
}

fn scores(p: &KvCacheAware, tokens: &[u32], cands: &[Candidate]) -> (Vec<f64>, Option<f64>) {
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = vec![0.0; refs.len()];
    let note = p.score(&Request::new("m").with_token_ids(tokens), &refs, &mut out);
    (out, note.match_ratio)
}

#[test]
fn scores_contiguous_prefix_from_events() {
    let (idx, p, cands) = setup(100);
    let a = EndpointId::from("a");
    idx.apply(&a, &stored(&[101, 102], None, &[1, 2, 3, 4]))
        .unwrap();
    idx.apply(&"b".into(), &stored(&[201], None, &[1, 2]))
        .unwrap();
    // Blocks [1,2] [3,4] [5]: a holds 2 of 3, b 1 of 3.
    assert_eq!(
        scores(&p, &[1, 2, 3, 4, 5], &cands),
        (vec![66.0, 33.0, 0.0], Some(2.0 / 3.0))
    );
    // A continuation chained through the engine's parent hash.
    idx.apply(&a, &stored(&[103], Some(102), &[5, 6])).unwrap();
    assert_eq!(
        scores(&p, &[1, 2, 3, 4, 5, 6], &cands).0,
        vec![100.0, 33.0, 0.0]
    );
    assert_eq!(idx.len(), 4);
    // A gap at block 0 means no match, whatever follows.
    idx.apply(
        &a,
        &KvEvent::BlockRemoved {
            block_hashes: vec![101],
        },
    )
    .unwrap();
    assert_eq!(
        scores(&p, &[1, 2, 3, 4, 5, 6], &cands).0,
        vec![0.0, 33.0, 0.0]
    );
    idx.apply(&"b".into(), &KvEvent::AllBlocksCleared).unwrap();
    assert_eq!(
        scores(&p, &[1, 2, 3, 4, 5, 6], &cands).0,
        vec![0.0, 0.0, 0.0]
    );
    assert_eq!(idx.len(), 2);
}

#[test]
fn no_token_ids_scores_zero() {
    let (idx, p, cands) = setup(100);
    idx.apply(&"a".into(), &stored(&[1], None, &[1, 2]))
        .unwrap();
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = vec![5.0; 3];
    let note = p.score(&Request::new("m").with_prompt("text only"), &refs, &mut out);
    assert_eq!(out, vec![0.0; 3]);
    assert_eq!(note.match_ratio, None);
}

#[test]
fn rejects_inconsistent_events_without_change() {
    let (idx, _, _) = setup(100);
    let a = EndpointId::from("a");
    let e = idx.apply(&a, &stored(&[1], Some(99), &[1, 2])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid KV event: parent block 99 is unknown for endpoint a"
    );
    let e = idx.apply(&a, &stored(&[1, 2], None, &[1, 2])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid KV event: 2 token ids for 2 blocks of 2"
    );
    let e = idx
        .apply(
            &a,
            &KvEvent::BlockStored {
                block_hashes: vec![1],
                parent_block_hash: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 4,
            },
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid KV event: block size 4 differs from the index's 2"
    );
    assert_eq!(idx.len(), 0);
}

#[test]
fn cap_evicts_least_recently_stored() {
    let (idx, p, cands) = setup(2);
    idx.apply(&"a".into(), &stored(&[1, 2], None, &[1, 2, 3, 4]))
        .unwrap();
    idx.apply(&"b".into(), &stored(&[9], None, &[1, 2]))
        .unwrap();
    // a's block 0 was the oldest entry and is gone.
    assert_eq!(idx.len(), 2);
    assert_eq!(scores(&p, &[1, 2, 3, 4], &cands).0, vec![0.0, 50.0, 0.0]);
}

#[test]
fn restored_block_keeps_one_entry() {
    let (idx, p, cands) = setup(10);
    let a = EndpointId::from("a");
    idx.apply(&a, &stored(&[1], None, &[1, 2])).unwrap();
    idx.apply(&a, &stored(&[1], None, &[1, 2])).unwrap();
    assert_eq!(idx.len(), 1);
    assert_eq!(idx.distinct_blocks(), 1);
    idx.apply(
        &a,
        &KvEvent::BlockRemoved {
            block_hashes: vec![1],
        },
    )
    .unwrap();
    assert_eq!(idx.distinct_blocks(), 0);
    assert_eq!(scores(&p, &[1, 2], &cands).0, vec![0.0, 0.0, 0.0]);
}

#[test]
fn removed_endpoint_is_forgotten() {
    let (idx, p, cands) = setup(10);
    idx.apply(&"a".into(), &stored(&[1, 2], None, &[1, 2, 3, 4]))
        .unwrap();
    idx.remove_endpoint(&"a".into());
    assert!(idx.is_empty());
    assert_eq!(idx.distinct_blocks(), 0);
    assert_eq!(scores(&p, &[1, 2, 3, 4], &cands).0, vec![0.0, 0.0, 0.0]);
    // Events for the same id afterwards start from scratch.
    assert!(
        idx.apply(&"a".into(), &stored(&[3], Some(2), &[5, 6]))
            .is_err()
    );
}

#[test]
fn routed_requests_count_before_the_engine_reports_them() {
    let (idx, p, cands) = setup(100);
    let tokens = [1, 2, 3, 4, 5];
    // Nothing known: every candidate scores 0.
    assert_eq!(scores(&p, &tokens, &cands).0, vec![0.0, 0.0, 0.0]);
    // The router sent the prompt to b: its two full blocks count for b at once (the short
    // last block [5] is never stored by an engine, so it is not recorded).
    let done = route(&p, &tokens, &cands[1]);
    assert_eq!((idx.provisional_len(), idx.pinned_len()), (2, 2));
    assert_eq!(idx.len(), 0);
    assert_eq!(
        scores(&p, &[1, 2, 3, 4, 9, 9], &cands),
        (vec![0.0, 66.0, 0.0], Some(2.0 / 3.0))
    );
    // b's engine stores the first block: that entry is confirmed, the second still provisional.
    idx.apply(&"b".into(), &stored(&[901], None, &[1, 2]))
        .unwrap();
    assert_eq!((idx.len(), idx.provisional_len()), (1, 1));
    assert_eq!(scores(&p, &[1, 2, 3, 4], &cands).0, vec![0.0, 100.0, 0.0]);
    idx.apply(&"b".into(), &stored(&[902], Some(901), &[3, 4]))
        .unwrap();
    assert_eq!((idx.len(), idx.provisional_len()), (2, 0));
    // The request ended: its blocks are no longer pinned.
    p.on_completed(&done, true);
    assert_eq!(idx.pinned_len(), 0);
    // The engine evicts the second block: the match shrinks to what the engine holds.
    idx.apply(
        &"b".into(),
        &KvEvent::BlockRemoved {
            block_hashes: vec![902],
        },
    )
    .unwrap();
    assert_eq!(scores(&p, &[1, 2, 3, 4], &cands).0, vec![0.0, 50.0, 0.0]);
}

#[test]
fn provisional_entries_are_cleared_with_their_endpoint_and_bounded() {
    let (idx, p, cands) = setup(3);
    let req_tokens = [1, 2, 3, 4];
    for c in [&cands[0], &cands[2]] {
        let done = route(&p, &req_tokens, c);
        p.on_completed(&done, true);
    }
    assert_eq!((idx.provisional_len(), idx.pinned_len()), (3, 0));
    // Four entries over a cap of 3: the least recently recorded one went. Blocks are
    // recorded last block first, so that is a's [3,4]; a still matches one block, c both.
    assert_eq!(scores(&p, &req_tokens, &cands).0, vec![50.0, 0.0, 100.0]);
    idx.apply(&"c".into(), &KvEvent::AllBlocksCleared).unwrap();
    assert_eq!(scores(&p, &req_tokens, &cands).0, vec![50.0, 0.0, 0.0]);
    idx.remove_endpoint(&"a".into());
    assert_eq!(idx.provisional_len(), 0);
    assert_eq!(scores(&p, &req_tokens, &cands).0, vec![0.0, 0.0, 0.0]);
    // A query of another block size records nothing.
    let hashes = [7u64, 8];
    idx.record_routed(
        &"a".into(),
        &KvQuery {
            model: "m",
            token_ids: &[1, 2, 3, 4, 5, 6, 7, 8],
            block_size: 4,
            block_hashes: &hashes,
        },
    );
    assert_eq!(idx.provisional_len(), 0);
}

#[test]
fn an_eviction_while_a_routed_request_runs_keeps_its_blocks_there() {
    let (idx, p, cands) = setup(100);
    let a = EndpointId::from("a");
    // a's engine holds the prefix [1,2][3,4] from an earlier request.
    idx.apply(&a, &stored(&[101, 102], None, &[1, 2, 3, 4]))
        .unwrap();
    // A request for it is sent to a; before it runs, a's busy engine evicts its old copy.
    let done = route(&p, &[1, 2, 3, 4], &cands[0]);
    idx.apply(
        &a,
        &KvEvent::BlockRemoved {
            block_hashes: vec![101, 102],
        },
    )
    .unwrap();
    assert_eq!(idx.len(), 0);
    // The request computes the blocks again on a: the next one with the prefix follows it.
    assert_eq!(scores(&p, &[1, 2, 3, 4, 5], &cands).0, vec![66.0, 0.0, 0.0]);
    // Two requests pin the same blocks; each end releases one.
    let second = route(&p, &[1, 2, 3, 4], &cands[0]);
    p.on_completed(&done, true);
    assert_eq!(idx.pinned_len(), 2);
    p.on_completed(&second, false);
    assert_eq!(idx.pinned_len(), 0);
    // Confirmed by nothing: the provisional entries of the two requests remain.
    assert_eq!(idx.provisional_len(), 2);
    // A removed endpoint takes its pins with it.
    let _third = route(&p, &[1, 2, 3, 4], &cands[1]);
    assert_eq!(idx.pinned_len(), 2);
    idx.remove_endpoint(&"b".into());
    assert_eq!(idx.pinned_len(), 0);
}

#[test]
fn pins_stop_at_the_cap() {
    let (idx, p, cands) = setup(3);
    let _done = route(&p, &[1, 2, 3, 4, 5, 6, 7, 8], &cands[0]);
    assert_eq!(idx.pinned_len(), 3);
}
