//! The paged KV cache with prefix caching.
//!
//! `total` blocks of `block_size` tokens. A block is either *private* (allocated to one
//! sequence, not yet full or not yet hashed), *cached and referenced* (full, hashed, used by at
//! least one running sequence), or *cached and free* (full, hashed, unreferenced: reusable by a
//! later prefix hit, evicted least-recently-used first when space is needed). This is vLLM's
//! `KVCacheManager` behaviour: usage counts private and referenced blocks, and cached free
//! blocks sit in the free queue (`vllm/v1/core/block_pool.py`).
//!
//! Every block has a physical id in `1..=total` (vLLM reserves block 0 as its null block), as
//! vLLM's block pool hands them out: never-used blocks in ascending order first, then freed
//! ones in the order they were freed. A prefill engine reports the ids of a request's cached
//! blocks as `kv_transfer_params.remote_block_ids`.
//!
//! | operation | cost |
//! |---|---|
//! | prefix lookup of n blocks | O(n) hash-map probes |
//! | allocate k blocks | O(k) (evictions pop the LRU tail) |
//! | commit / release a block | O(1) |

use std::collections::{HashMap, VecDeque};

use lru::LruCache;

use crate::hash::{BlockHash, ExtraKey};

/// A KV-cache event, emitted when the set of cached blocks changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Blocks became cached (reusable by a prefix hit).
    BlockStored {
        /// Hashes of the stored blocks, in chain order.
        block_hashes: Vec<BlockHash>,
        /// Hash of the block before the first one, `None` for the chain root.
        parent_block_hash: Option<BlockHash>,
        /// Token ids of all stored blocks, concatenated (`block_size` per block).
        token_ids: Vec<u32>,
        /// Tokens per block.
        block_size: usize,
        /// LoRA adapter the blocks belong to.
        lora_name: Option<String>,
        /// Each block's hash extra keys (empty: none), one entry per block.
        extra_keys: Vec<Vec<ExtraKey>>,
    },
    /// Blocks were evicted.
    BlockRemoved {
        /// Hashes of the removed blocks.
        block_hashes: Vec<BlockHash>,
    },
    /// The whole cache was cleared.
    AllBlocksCleared,
}

#[derive(Debug)]
struct Block {
    refs: u32,
    /// Physical block id.
    id: u32,
}

/// The block pool. Not thread-safe; owned by the engine loop.
#[derive(Debug)]
pub(crate) struct KvCache {
    total: usize,
    block_size: usize,
    cached: HashMap<BlockHash, Block>,
    /// Cached blocks with `refs == 0`, least recently used first to go.
    free_cached: LruCache<BlockHash, ()>,
    /// Ids of the private blocks (allocated, not yet cached).
    private: VecDeque<u32>,
    /// Next never-used id; ids above `total` do not exist.
    next_fresh: usize,
    /// Ids of blocks that held data and were freed, first freed first.
    recycled: VecDeque<u32>,
    events: Vec<KvEvent>,
}

impl KvCache {
    pub(crate) fn new(total: usize, block_size: usize) -> Self {
        Self {
            total,
            block_size,
            cached: HashMap::new(),
            free_cached: LruCache::unbounded(),
            private: VecDeque::new(),
            next_fresh: 1,
            recycled: VecDeque::new(),
            events: Vec::new(),
        }
    }

    /// Blocks in use by running sequences (private plus referenced cached blocks).
    pub(crate) fn used(&self) -> usize {
        self.private.len() + self.cached.len() - self.free_cached.len()
    }

    /// `used / total`, 0..=1 (vLLM `kv_cache_usage_perc`).
    pub(crate) fn usage(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.used() as f64 / self.total as f64
    }

    /// Blocks that could be allocated now (empty plus evictable).
    pub(crate) fn available(&self) -> usize {
        self.total - self.used()
    }

    /// Cached blocks held (referenced or free).
    #[cfg(test)]
    pub(crate) fn cached_blocks(&self) -> usize {
        self.cached.len()
    }

    /// Physical ids of the cached blocks among `hashes`, in order.
    pub(crate) fn block_ids(&self, hashes: &[BlockHash]) -> Vec<u32> {
        hashes
            .iter()
            .filter_map(|h| self.cached.get(h).map(|b| b.id))
            .collect()
    }

    /// Takes an empty block's id: never-used ids first, then freed ones.
    fn take_empty(&mut self) -> Option<u32> {
        if self.next_fresh <= self.total {
            let id = u32::try_from(self.next_fresh).unwrap_or(u32::MAX);
            self.next_fresh += 1;
            Some(id)
        } else {
            self.recycled.pop_front()
        }
    }

    /// Number of leading hashes of `hashes` that are cached (does not touch LRU order).
    pub(crate) fn longest_prefix(&self, hashes: &[BlockHash]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.cached.contains_key(h))
            .count()
    }

    /// Takes a reference on cached blocks (a prefix hit). Every hash must be cached.
    pub(crate) fn acquire(&mut self, hashes: &[BlockHash]) {
        for h in hashes {
            if let Some(b) = self.cached.get_mut(h) {
                if b.refs == 0 {
                    self.free_cached.pop(h);
                }
                b.refs += 1;
            }
        }
    }

    /// Allocates `n` private blocks, evicting free cached blocks as needed. Returns false (and
    /// allocates nothing) if there is not enough room.
    pub(crate) fn allocate(&mut self, n: usize) -> bool {
        if n > self.available() {
            return false;
        }
        let empty = self.total - self.private.len() - self.cached.len();
        if n > empty {
            let mut removed = Vec::new();
            for _ in 0..n - empty {
                if let Some((h, ())) = self.free_cached.pop_lru() {
                    if let Some(b) = self.cached.remove(&h) {
                        self.recycled.push_back(b.id);
                    }
                    removed.push(h);
                }
            }
            if !removed.is_empty() {
                self.events.push(KvEvent::BlockRemoved {
                    block_hashes: removed,
                });
            }
        }
        for _ in 0..n {
            if let Some(id) = self.take_empty() {
                self.private.push_back(id);
            }
        }
        debug_assert!(
            self.private.len() + self.cached.len() <= self.total,
            "invariant: pool overflow"
        );
        true
    }

    /// Turns one private block of a sequence into a cached block with hash `hash`. If the hash
    /// is already cached (another sequence computed the same block) the private block is
    /// freed and the sequence references the existing one. Emits `BlockStored` for new blocks,
    /// with the block's hash `extra` keys.
    pub(crate) fn commit(
        &mut self,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[u32],
        lora: Option<&str>,
        extra: Vec<ExtraKey>,
    ) {
        // Private blocks are counted, not owned by a sequence: the oldest one is filled.
        let id = self.private.pop_front();
        if let Some(b) = self.cached.get_mut(&hash) {
            if b.refs == 0 {
                self.free_cached.pop(&hash);
            }
            b.refs += 1;
            if let Some(id) = id {
                self.recycled.push_back(id);
            }
            return;
        }
        let id = id.or_else(|| self.take_empty()).unwrap_or(0);
        self.cached.insert(hash, Block { refs: 1, id });
        // Merge with the previous event when it continues the same chain.
        if let Some(KvEvent::BlockStored {
            block_hashes,
            token_ids,
            lora_name,
            extra_keys,
            ..
        }) = self.events.last_mut()
            && block_hashes.last().copied() == parent
            && lora_name.as_deref() == lora
        {
            block_hashes.push(hash);
            token_ids.extend_from_slice(tokens);
            extra_keys.push(extra);
            return;
        }
        self.events.push(KvEvent::BlockStored {
            block_hashes: vec![hash],
            parent_block_hash: parent,
            token_ids: tokens.to_vec(),
            block_size: self.block_size,
            lora_name: lora.map(str::to_owned),
            extra_keys: vec![extra],
        });
    }

    /// Releases a finished or preempted sequence: drops `private` private blocks and one
    /// reference on each of `hashes`. Blocks that reach zero references become evictable, the
    /// last block of the chain first (vLLM frees in reverse order so that tails go first).
    pub(crate) fn release(&mut self, hashes: &[BlockHash], private: usize) {
        for _ in 0..private {
            if let Some(id) = self.private.pop_back() {
                self.recycled.push_back(id);
            }
        }
        for h in hashes.iter().rev() {
            if let Some(b) = self.cached.get_mut(h) {
                b.refs = b.refs.saturating_sub(1);
                if b.refs == 0 {
                    self.free_cached.push(*h, ());
                }
            }
        }
    }

    /// Drops every free cached block (referenced blocks stay); emits `AllBlocksCleared`
    /// when the cache held no referenced blocks, else `BlockRemoved`.
    pub(crate) fn reset(&mut self) {
        let removed: Vec<BlockHash> =
            std::iter::from_fn(|| self.free_cached.pop_lru().map(|(h, ())| h)).collect();
        for h in &removed {
            if let Some(b) = self.cached.remove(h) {
                self.recycled.push_back(b.id);
            }
        }
        if self.cached.is_empty() {
            self.events.push(KvEvent::AllBlocksCleared);
        } else if !removed.is_empty() {
            self.events.push(KvEvent::BlockRemoved {
                block_hashes: removed,
            });
        }
    }

    /// Takes the events produced since the last call.
    pub(crate) fn take_events(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests;
