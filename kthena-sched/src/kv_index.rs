//! The KV-cache index behind `kvcache-aware`: which endpoint holds which token blocks,
//! learned from the engines' KV events (vLLM's `vllm/distributed/kv_events.py`).

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{PoisonError, RwLock};

use lru::LruCache;
use smallvec::SmallVec;

use crate::hash::token_block_hash;
use crate::types::{Candidate, EndpointId};
use crate::{Error, FastMap, Result};

/// One engine KV-cache event, decoded by the host from the engine's wire format (vLLM's
/// msgpack `BlockStored` / `BlockRemoved` / `AllBlocksCleared`; SGLang's equivalents).
///
/// Engine block hashes are opaque 64-bit values (vLLM's int hashes, or a 32-byte digest folded
/// to its low 64 bits); the index maps them to its own chained token hashes
/// ([`token_block_hash`]) using `token_ids` and `parent_block_hash`, so engines with
/// per-process hash seeds still match requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// The engine cached `block_hashes.len()` consecutive full blocks.
    BlockStored {
        /// Engine hashes of the stored blocks, in sequence order.
        block_hashes: Vec<u64>,
        /// Engine hash of the block before the first stored one; `None` when the first
        /// stored block starts a sequence.
        parent_block_hash: Option<u64>,
        /// The tokens of all stored blocks, concatenated
        /// (`block_hashes.len() × block_size` ids).
        token_ids: Vec<u32>,
        /// Tokens per block; must equal the index's block size.
        block_size: usize,
    },
    /// The engine evicted these blocks.
    BlockRemoved {
        /// Engine hashes of the evicted blocks.
        block_hashes: Vec<u64>,
    },
    /// The engine dropped its whole prefix cache (for example after a reset).
    AllBlocksCleared,
}

/// What `kvcache-aware` asks an index per request.
#[derive(Debug, Clone, Copy)]
pub struct KvQuery<'a> {
    /// The request's model name (Go Kthena keys its Redis entries by it).
    pub model: &'a str,
    /// The prompt's token ids (at most `block_size × max_blocks` of them are hashed).
    pub token_ids: &'a [u32],
    /// Tokens per block.
    pub block_size: usize,
    /// Chained block hashes of `token_ids` ([`token_block_hashes`](crate::token_block_hashes)).
    pub block_hashes: &'a [u64],
}

/// A KV-cache index: answers "how many leading blocks of this prompt does each candidate
/// already hold?". [`InMemoryKvIndex`] is fed by KV events; a host may provide another
/// implementation (for example Go Kthena's Redis layout) through
/// [`SchedulerBuilder::kv_index`](crate::SchedulerBuilder::kv_index).
pub trait KvIndex: Send + Sync + fmt::Debug {
    /// Applies one KV event reported by `endpoint`.
    ///
    /// # Errors
    /// Implementation-defined; [`InMemoryKvIndex`] returns [`Error::InvalidKvEvent`] for an
    /// inconsistent event (the index is left unchanged by it).
    fn apply(&self, endpoint: &EndpointId, event: &KvEvent) -> Result<()>;

    /// Writes into `out[i]` the number of blocks of `query.block_hashes`, counted from block 0
    /// without gaps, that `cands[i]` holds (`out.len() == cands.len()`).
    fn match_prefix(&self, query: &KvQuery<'_>, cands: &[&Candidate], out: &mut [u32]);

    /// Forgets everything about `endpoint`.
    fn remove_endpoint(&self, endpoint: &EndpointId);

    /// Tokens per block of the hashes this index matches; `None` when it matches any block
    /// size a query brings.
    fn block_size(&self) -> Option<usize>;

    /// The host sent a request with `query`'s prompt to `endpoint`. An index may count the
    /// prompt's full blocks as held there *provisionally*, so that the next request with the
    /// same prefix follows this one before the engine has computed and reported the blocks
    /// (the engine's `BlockStored` event later confirms them). Default: nothing.
    fn record_routed(&self, _endpoint: &EndpointId, _query: &KvQuery<'_>) {}

    /// The host sent a request with `query`'s prompt to `endpoint` and will call
    /// [`unpin_routed`](Self::unpin_routed) when it ends. Until then an index may count the
    /// prompt's full blocks as held there whatever the endpoint's events say: an engine
    /// cannot evict the blocks of a running request, and a request still queued there
    /// computes an evicted block again before a later request with the same prefix runs.
    /// Without this, an eviction event for an older copy of a block (a busy engine's
    /// queue outlasts its cache) would take a prefix away from the endpoint a request for
    /// it is about to run on, and the next request of that prefix would go elsewhere.
    /// Default: nothing.
    fn pin_routed(&self, _endpoint: &EndpointId, _query: &KvQuery<'_>) {}

    /// The request [`pin_routed`](Self::pin_routed) pinned ended; `block_hashes` are the
    /// chained hashes of the blocks it pinned (those of its query's full blocks). Default:
    /// nothing.
    fn unpin_routed(&self, _endpoint: &EndpointId, _block_hashes: &[u64]) {}

    /// Number of (endpoint, block) entries held.
    fn len(&self) -> usize;

    /// Whether [`match_prefix`](Self::match_prefix) does I/O (the index lives in another
    /// process, for example Redis). A host should then answer the lookups of
    /// [`Scheduler::prepare`](crate::Scheduler::prepare) itself before scheduling, so that
    /// scheduling never blocks ([`Prefetch`](crate::Prefetch)). Default: `false`.
    fn is_remote(&self) -> bool {
        false
    }

    /// Whether the index holds no entry.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A bounded in-memory [`KvIndex`].
///
/// Layout (one `RwLock`; matching takes the read lock, events the write lock):
///
/// | structure | key → value | role |
/// |---|---|---|
/// | `entries` (LRU, capacity `max_entries`) | (endpoint slot, engine hash) → chained token hash | resolves parents and removals; bounds memory |
/// | `blocks` | chained token hash → [(endpoint slot, refcount)] | answers matches |
/// | `slots` | [`EndpointId`] → slot number | interns ids |
/// | `provisional` (LRU, capacity `max_entries`) | (endpoint slot, chained token hash) | blocks routed to an endpoint and not yet confirmed by its events |
/// | `pinned` (at most `max_entries`) | (endpoint slot, chained token hash) → requests | blocks of the requests routed to an endpoint that have not ended |
///
/// When `max_entries` is reached, storing a block evicts the least recently stored entry of
/// any endpoint. Matching is `O(blocks matched × candidates)`; removing an endpoint or
/// clearing it scans the entries (`O(max_entries)`), which only happens on pod churn.
///
/// Provisional entries ([`KvIndex::record_routed`]) make the router's own decisions count
/// at once, as in Dynamo's approximate KV routing mode: without them a burst of requests
/// sharing a new prefix scatters over the endpoints during the tens of milliseconds before
/// the first engine reports its blocks. A `BlockStored` event for the same block and
/// endpoint turns the provisional entry into a confirmed one; an entry never confirmed (the
/// request failed or was cancelled before its prefill, the engine does not publish events)
/// stays until the provisional LRU evicts it, or its endpoint is cleared or removed.
///
/// Pinned entries ([`KvIndex::pin_routed`]) hold a request's blocks on its endpoint from the
/// moment it is sent until it ends ([`KvIndex::unpin_routed`]), whatever eviction events
/// arrive meanwhile; when the cap is reached a request pins nothing more.
///
/// Memory is about 160 heap bytes per entry at capacity (measured by
/// `benches/index_memory.rs`; see `docs/scheduler.md`).
pub struct InMemoryKvIndex {
    block_size: usize,
    inner: RwLock<KvInner>,
}

struct KvInner {
    slots: FastMap<EndpointId, u32>,
    next_slot: u32,
    entries: LruCache<(u32, u64), u64, foldhash::fast::RandomState>,
    cap: NonZeroUsize,
    /// Holders as (slot, refcount); two fit inline.
    blocks: FastMap<u64, SmallVec<[(u32, u32); 2]>>,
    /// (slot, chained token hash) routed there and not yet confirmed by an event.
    provisional: LruCache<(u32, u64), (), foldhash::fast::RandomState>,
    /// (slot, chained token hash) → requests routed there that have not ended.
    pinned: FastMap<(u32, u64), u32>,
}

impl fmt::Debug for InMemoryKvIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("InMemoryKvIndex")
            .field("block_size", &self.block_size)
            .field("entries", &g.entries.len())
            .field("max_entries", &g.cap)
            .field("endpoints", &g.slots.len())
            .finish()
    }
}

// === impl InMemoryKvIndex ===

impl InMemoryKvIndex {
    /// An index for blocks of `block_size` tokens holding at most `max_entries`
    /// (endpoint, block) entries.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`] if `block_size` or `max_entries` is 0.
    pub fn new(block_size: usize, max_entries: usize) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidArgs {
            plugin: "kvcache-aware".to_owned(),
            reason: reason.to_owned(),
        };
        if block_size == 0 {
            return Err(bad("blockSizeToHash must be > 0"));
        }
        let cap =
            NonZeroUsize::new(max_entries).ok_or_else(|| bad("maxIndexEntries must be > 0"))?;
        Ok(Self {
            block_size,
            inner: RwLock::new(KvInner {
                slots: FastMap::default(),
                next_slot: 0,
                entries: LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default()),
                cap,
                blocks: FastMap::default(),
                provisional: LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default()),
                pinned: FastMap::default(),
            }),
        })
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The entry cap given at construction.
    pub fn max_entries(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .cap
            .get()
    }

    /// Number of provisional (routed, not yet confirmed) (endpoint, block) entries.
    pub fn provisional_len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .provisional
            .len()
    }

    /// The hashes of `query`'s full blocks (an engine never stores a partial one); `None` when
    /// there is none or the query's block size is not this index's.
    fn full_blocks<'q>(&self, query: &KvQuery<'q>) -> Option<&'q [u64]> {
        if query.block_size != self.block_size {
            return None;
        }
        let full = (query.token_ids.len() / self.block_size).min(query.block_hashes.len());
        (full > 0).then(|| &query.block_hashes[..full])
    }

    /// Number of pinned (endpoint, block) entries: blocks of requests that have not ended.
    pub fn pinned_len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .pinned
            .len()
    }

    /// Number of distinct block hashes held by at least one endpoint.
    pub fn distinct_blocks(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .blocks
            .len()
    }
}

impl KvInner {
    fn slot(&mut self, id: &EndpointId) -> u32 {
        if let Some(s) = self.slots.get(id) {
            return *s;
        }
        let s = self.next_slot;
        self.next_slot = self.next_slot.wrapping_add(1);
        self.slots.insert(id.clone(), s);
        s
    }

    fn unhold(&mut self, slot: u32, local: u64) {
        if let Some(holders) = self.blocks.get_mut(&local) {
            if let Some(pos) = holders.iter().position(|(s, _)| *s == slot) {
                holders[pos].1 -= 1;
                if holders[pos].1 == 0 {
                    holders.swap_remove(pos);
                }
            }
            if holders.is_empty() {
                self.blocks.remove(&local);
            }
        }
    }

    fn hold(&mut self, slot: u32, local: u64) {
        let holders = self.blocks.entry(local).or_default();
        match holders.iter_mut().find(|(s, _)| *s == slot) {
            Some(h) => h.1 += 1,
            None => holders.push((slot, 1)),
        }
    }

    fn clear_slot(&mut self, slot: u32) {
        self.pinned.retain(|(s, _), _| *s != slot);
        let prov: Vec<(u32, u64)> = self
            .provisional
            .iter()
            .filter(|((s, _), _)| *s == slot)
            .map(|(k, _)| *k)
            .collect();
        for k in prov {
            self.provisional.pop(&k);
        }
        let keys: Vec<(u32, u64)> = self
            .entries
            .iter()
            .filter(|((s, _), _)| *s == slot)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(local) = self.entries.pop(&k) {
                self.unhold(slot, local);
            }
        }
    }
}

impl KvIndex for InMemoryKvIndex {
    fn apply(&self, endpoint: &EndpointId, event: &KvEvent) -> Result<()> {
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
            } => {
                if *block_size != self.block_size {
                    return Err(Error::InvalidKvEvent(format!(
                        "block size {block_size} differs from the index's {}",
                        self.block_size
                    )));
                }
                if token_ids.len() != block_hashes.len() * self.block_size {
                    return Err(Error::InvalidKvEvent(format!(
                        "{} token ids for {} blocks of {}",
                        token_ids.len(),
                        block_hashes.len(),
                        self.block_size
                    )));
                }
                let slot = g.slot(endpoint);
                let mut prev = match parent_block_hash {
                    None => None,
                    Some(p) => match g.entries.peek(&(slot, *p)) {
                        Some(local) => Some(*local),
                        None => {
                            return Err(Error::InvalidKvEvent(format!(
                                "parent block {p} is unknown for endpoint {endpoint}"
                            )));
                        }
                    },
                };
                for (engine, tokens) in block_hashes.iter().zip(token_ids.chunks(self.block_size)) {
                    let local = token_block_hash(prev, tokens);
                    prev = Some(local);
                    let cap = g.cap.get();
                    match crate::bounded::push_bounded(&mut g.entries, cap, (slot, *engine), local)
                    {
                        Some((k, old)) if k == (slot, *engine) => {
                            // Re-stored: the value was replaced.
                            g.unhold(slot, old);
                        }
                        Some(((s, _), old)) => g.unhold(s, old),
                        None => {}
                    }
                    g.hold(slot, local);
                    g.provisional.pop(&(slot, local));
                }
            }
            KvEvent::BlockRemoved { block_hashes } => {
                let Some(&slot) = g.slots.get(endpoint) else {
                    return Ok(());
                };
                for h in block_hashes {
                    if let Some(local) = g.entries.pop(&(slot, *h)) {
                        g.unhold(slot, local);
                    }
                }
            }
            KvEvent::AllBlocksCleared => {
                if let Some(&slot) = g.slots.get(endpoint) {
                    g.clear_slot(slot);
                }
            }
        }
        Ok(())
    }

    fn match_prefix(&self, query: &KvQuery<'_>, cands: &[&Candidate], out: &mut [u32]) {
        out.fill(0);
        if query.block_size != self.block_size {
            return;
        }
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        // (candidate index, slot) of the candidates still matching.
        let mut active: SmallVec<[(usize, u32); 8]> = cands
            .iter()
            .enumerate()
            .filter_map(|(i, c)| g.slots.get(&c.id).map(|s| (i, *s)))
            .collect();
        let check_provisional = !g.provisional.is_empty();
        let check_pinned = !g.pinned.is_empty();
        for (n, h) in query.block_hashes.iter().enumerate() {
            if active.is_empty() {
                break;
            }
            let holders = g.blocks.get(h);
            let n = u32::try_from(n + 1).unwrap_or(u32::MAX);
            active.retain(|(ci, slot)| {
                let held = holders.is_some_and(|hs| hs.iter().any(|(s, _)| s == slot))
                    || (check_pinned && g.pinned.contains_key(&(*slot, *h)))
                    || (check_provisional && g.provisional.peek(&(*slot, *h)).is_some());
                if held {
                    out[*ci] = n;
                }
                held
            });
        }
    }

    fn record_routed(&self, endpoint: &EndpointId, query: &KvQuery<'_>) {
        let Some(full) = self.full_blocks(query) else {
            return;
        };
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let slot = g.slot(endpoint);
        let cap = g.cap.get();
        // Last block first, so that the LRU keeps a prompt's shorter prefixes longest.
        for h in full.iter().rev() {
            let confirmed = g
                .blocks
                .get(h)
                .is_some_and(|hs| hs.iter().any(|(s, _)| *s == slot));
            if !confirmed {
                crate::bounded::push_bounded(&mut g.provisional, cap, (slot, *h), ());
            }
        }
    }

    fn pin_routed(&self, endpoint: &EndpointId, query: &KvQuery<'_>) {
        let Some(full) = self.full_blocks(query) else {
            return;
        };
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let slot = g.slot(endpoint);
        let cap = g.cap.get();
        for h in full {
            if g.pinned.len() >= cap && !g.pinned.contains_key(&(slot, *h)) {
                break;
            }
            *g.pinned.entry((slot, *h)).or_insert(0) += 1;
        }
    }

    fn unpin_routed(&self, endpoint: &EndpointId, block_hashes: &[u64]) {
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let Some(&slot) = g.slots.get(endpoint) else {
            return;
        };
        for h in block_hashes {
            if let Some(n) = g.pinned.get_mut(&(slot, *h)) {
                *n -= 1;
                if *n == 0 {
                    g.pinned.remove(&(slot, *h));
                }
            }
        }
    }

    fn block_size(&self) -> Option<usize> {
        Some(self.block_size)
    }

    fn remove_endpoint(&self, endpoint: &EndpointId) {
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = g.slots.remove(endpoint) {
            g.clear_slot(slot);
        }
    }

    fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }
}

#[cfg(test)]
mod tests;
