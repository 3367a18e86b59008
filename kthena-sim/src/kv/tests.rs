use super::*;

fn h(n: u8) -> BlockHash {
    BlockHash::from_digest(&[n; 32])
}

#[test]
fn prefix_hit_release_and_lru_eviction() {
    let mut kv = KvCache::new(4, 2);
    assert!(kv.allocate(2));
    kv.commit(h(10), None, &[1, 2], None, vec![]);
    kv.commit(h(11), Some(h(10)), &[3, 4], None, vec![]);
    assert_eq!(kv.used(), 2);
    assert_eq!(
        kv.take_events(),
        vec![KvEvent::BlockStored {
            block_hashes: vec![h(10), h(11)],
            parent_block_hash: None,
            token_ids: vec![1, 2, 3, 4],
            block_size: 2,
            lora_name: None,
            extra_keys: vec![vec![], vec![]],
        }]
    );
    kv.release(&[h(10), h(11)], 0);
    assert_eq!(kv.used(), 0);
    assert_eq!(kv.cached_blocks(), 2);
    assert_eq!(kv.longest_prefix(&[h(10), h(11), h(12)]), 2);
    // Fill the two empty blocks, then one more evicts the chain tail (11) first.
    assert!(kv.allocate(2));
    assert!(kv.allocate(1));
    assert_eq!(
        kv.take_events(),
        vec![KvEvent::BlockRemoved {
            block_hashes: vec![h(11)]
        }]
    );
    assert_eq!(kv.longest_prefix(&[h(10), h(11)]), 1);
    assert!(!kv.allocate(2));
    assert_eq!(kv.usage(), 0.75);
    kv.acquire(&[h(10)]);
    assert_eq!(kv.usage(), 1.0);
    assert!(!kv.allocate(1));
}

#[test]
fn physical_block_ids_are_handed_out_like_vllm() {
    let mut kv = KvCache::new(3, 2);
    assert!(kv.allocate(3));
    kv.commit(h(10), None, &[1, 2], None, vec![]);
    kv.commit(h(11), Some(h(10)), &[3, 4], None, vec![]);
    assert_eq!(kv.block_ids(&[h(10), h(11)]), vec![1, 2]);
    // The third (private) block is freed; the next allocation reuses its id.
    kv.release(&[h(10), h(11)], 1);
    assert!(kv.allocate(1));
    kv.commit(h(20), None, &[5, 6], None, vec![]);
    assert_eq!(kv.block_ids(&[h(20)]), vec![3]);
    // The next one evicts the least recently used cached block (11) and takes its id.
    assert!(kv.allocate(1));
    kv.commit(h(21), Some(h(20)), &[7, 8], None, vec![]);
    assert_eq!(kv.block_ids(&[h(10), h(11), h(20), h(21)]), vec![1, 3, 2]);
}

#[test]
fn duplicate_commit_shares_the_block() {
    let mut kv = KvCache::new(4, 2);
    assert!(kv.allocate(2));
    kv.commit(h(7), None, &[1, 2], None, vec![]);
    kv.commit(h(7), None, &[1, 2], None, vec![]);
    assert_eq!(kv.used(), 1);
    assert_eq!(kv.take_events().len(), 1);
    kv.release(&[h(7), h(7)], 0);
    assert_eq!(kv.used(), 0);
    kv.reset();
    assert_eq!(kv.take_events(), vec![KvEvent::AllBlocksCleared]);
    assert_eq!(kv.cached_blocks(), 0);
}
