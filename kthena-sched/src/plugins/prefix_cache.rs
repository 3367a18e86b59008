//! `prefix-cache` (Go Kthena `pkg/kthena-router/scheduler/plugins/prefix_cache.go`): an approximate
//! index of which endpoint saw which prompt prefix, learned from the scheduler's own decisions.

use std::num::NonZeroUsize;
use std::sync::{Arc, PoisonError, RwLock};

use lru::LruCache;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use super::{invalid, ratio_score};
use crate::bounded::push_bounded;
use crate::decision::{PluginStats, ScoreNote};
use crate::hash::prefix_block_hashes;
use crate::plugin::ScorePlugin;
use crate::registry::BuildContext;
use crate::request::Request;
use crate::types::{Candidate, EndpointId};
use crate::{FastMap, Result};

/// Args of `prefix-cache` (Go's `prefix_cache.go`). Every value must be > 0 (Go Kthena silently
/// replaces values `<= 0` with the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PrefixCacheArgs {
    /// Bytes of prompt per hashed block. Default 64.
    pub block_size_to_hash: usize,
    /// At most this many leading blocks are hashed per request. Default 128.
    pub max_blocks_to_match: usize,
    /// Per-endpoint LRU capacity, in block hashes. Default 50000.
    pub max_hash_cache_size: usize,
    /// Matching stops once this many endpoints matched. Default 5.
    pub top_k_matches: usize,
}

impl Default for PrefixCacheArgs {
    /// `blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5`.
    fn default() -> Self {
        Self {
            block_size_to_hash: 64,
            max_blocks_to_match: 128,
            max_hash_cache_size: 50_000,
            top_k_matches: 5,
        }
    }
}

/// The store behind `prefix-cache`: per endpoint an LRU of block hashes (capacity
/// `maxHashCacheSize`), plus `hash → endpoints` for matching (Go Kthena
/// `plugins/cache/prefix_store.go`). The model is folded into the hash chain's root, so one
/// map serves every model.
///
/// Memory is bounded by `capacity × endpoints` entries; evicting a hash from an endpoint's
/// LRU also removes the endpoint from that hash's holder list.
#[derive(Debug)]
pub struct PrefixStore {
    cap: NonZeroUsize,
    inner: RwLock<StoreInner>,
}

#[derive(Debug, Default)]
struct StoreInner {
    slots: FastMap<EndpointId, u32>,
    next_slot: u32,
    /// Per endpoint slot: block hash → model slot (into `models`).
    lrus: FastMap<u32, LruCache<u64, u32, foldhash::fast::RandomState>>,
    /// Endpoint slots holding each hash; four fit inline.
    holders: FastMap<u64, SmallVec<[u32; 4]>>,
    /// Model names seen by [`PrefixStore::insert_for_model`], with their capacity evictions.
    models: Vec<(String, u64)>,
}

impl PrefixStore {
    /// A store keeping at most `capacity` hashes per endpoint (0 is raised to 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            cap: NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            inner: RwLock::new(StoreInner::default()),
        }
    }

    /// Records that `endpoint` holds the prefix `hashes` (in prompt order). Inserted from last
    /// to first, so an endpoint's LRU keeps shorter prefixes most recent (as Go Kthena).
    pub fn insert(&self, endpoint: &EndpointId, hashes: &[u64]) {
        self.insert_for_model(endpoint, "", hashes);
    }

    /// As [`insert`](Self::insert), for a request of `model`: the LRU capacity evictions these
    /// entries later cause are counted for `model` ([`evictions`](Self::evictions)).
    pub fn insert_for_model(&self, endpoint: &EndpointId, model: &str, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let g = &mut *g;
        let model_slot = match g.models.iter().position(|(m, _)| m == model) {
            Some(i) => i,
            None => {
                g.models.push((model.to_owned(), 0));
                g.models.len() - 1
            }
        };
        let model_slot = u32::try_from(model_slot).unwrap_or(u32::MAX);
        let slot = match g.slots.get(endpoint) {
            Some(s) => *s,
            None => {
                let s = g.next_slot;
                g.next_slot = g.next_slot.wrapping_add(1);
                g.slots.insert(endpoint.clone(), s);
                s
            }
        };
        let cap = self.cap.get();
        let lru = g.lrus.entry(slot).or_insert_with(|| {
            LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default())
        });
        for &h in hashes.iter().rev() {
            match push_bounded(lru, cap, h, model_slot) {
                Some((k, _)) if k == h => {}
                Some((evicted, m)) => {
                    if let Some((_, n)) = g.models.get_mut(m as usize) {
                        *n += 1;
                    }
                    unhold(&mut g.holders, evicted, slot);
                    g.holders.entry(h).or_default().push(slot);
                }
                None => g.holders.entry(h).or_default().push(slot),
            }
        }
    }

    /// Go Kthena's `FindTopMatches`: walks `hashes` from last to first; each candidate holding
    /// hash `i` and not matched yet gets match length `i + 1`; stops once `top_k` candidates
    /// matched. Writes match lengths (blocks) into `out` (0 = no match).
    pub fn find_top_matches(
        &self,
        hashes: &[u64],
        cands: &[&Candidate],
        top_k: usize,
        out: &mut [u32],
    ) {
        out.fill(0);
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        // slot → candidate index + 1 (0 = not a candidate).
        let mut by_slot = vec![0u32; g.next_slot as usize];
        let mut any = false;
        for (i, c) in cands.iter().enumerate() {
            if let Some(&s) = g.slots.get(&c.id) {
                by_slot[s as usize] = u32::try_from(i + 1).unwrap_or(0);
                any = true;
            }
        }
        if !any {
            return;
        }
        let mut matched = 0;
        for (n, h) in hashes.iter().enumerate().rev() {
            let Some(hs) = g.holders.get(h) else { continue };
            for &s in hs {
                let ci = by_slot[s as usize];
                if ci != 0 && out[ci as usize - 1] == 0 {
                    out[ci as usize - 1] = u32::try_from(n + 1).unwrap_or(u32::MAX);
                    matched += 1;
                    if matched >= top_k {
                        return;
                    }
                }
            }
        }
    }

    /// Forgets everything about `endpoint`.
    pub fn remove(&self, endpoint: &EndpointId) {
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let g = &mut *g;
        let Some(slot) = g.slots.remove(endpoint) else {
            return;
        };
        if let Some(lru) = g.lrus.remove(&slot) {
            for (h, _) in lru.iter() {
                unhold(&mut g.holders, *h, slot);
            }
        }
    }

    /// Number of block hashes held by `endpoint`.
    pub fn len_of(&self, endpoint: &EndpointId) -> usize {
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        g.slots
            .get(endpoint)
            .and_then(|s| g.lrus.get(s))
            .map_or(0, LruCache::len)
    }

    /// Total (endpoint, hash) entries.
    pub fn len(&self) -> usize {
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        g.lrus.values().map(LruCache::len).sum()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(model, evictions)` for every model inserted so far: entries dropped because an
    /// endpoint's LRU was full (Go Kthena's `kthena_router_prefix_cache_evictions_total`;
    /// removing an endpoint is not counted). Counts only grow.
    pub fn evictions(&self) -> Vec<(String, u64)> {
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        g.models.clone()
    }
}

fn unhold(holders: &mut FastMap<u64, SmallVec<[u32; 4]>>, h: u64, slot: u32) {
    if let Some(v) = holders.get_mut(&h) {
        v.retain(|s| *s != slot);
        if v.is_empty() {
            holders.remove(&h);
        }
    }
}

/// `prefix-cache` (Go Kthena `plugins/prefix_cache.go`).
///
/// Hashes the prompt bytes in blocks ([`prefix_block_hashes`]), finds each candidate's
/// longest recorded prefix ([`PrefixStore::find_top_matches`]) and scores
/// `trunc(match_len / total_blocks × 100)`; unmatched candidates score 0, and an empty prompt
/// scores every candidate 0. Reports `longest match / total blocks` as its match ratio.
/// [`on_scheduled`](ScorePlugin::on_scheduled) records the prompt's blocks for the chosen
/// endpoint.
#[derive(Debug)]
pub struct PrefixCache {
    args: PrefixCacheArgs,
    store: Arc<PrefixStore>,
}

impl PrefixCache {
    /// Builds the plugin.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`](crate::Error::InvalidArgs) if any argument is 0.
    pub fn new(args: PrefixCacheArgs) -> Result<Self> {
        let args = Self::validate(args)?;
        Self::with_store(args, Arc::new(PrefixStore::new(args.max_hash_cache_size)))
    }

    /// The plugin over an existing `store` (shared with another plugin, or kept from an
    /// earlier scheduler); `maxHashCacheSize` is the store's own capacity then.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`](crate::Error::InvalidArgs) if any argument is 0.
    pub fn with_store(args: PrefixCacheArgs, store: Arc<PrefixStore>) -> Result<Self> {
        Ok(Self {
            args: Self::validate(args)?,
            store,
        })
    }

    /// The plugin of a scheduler build: its store is kept across
    /// [`Scheduler::reconfigure`](crate::Scheduler::reconfigure) while `blockSizeToHash`
    /// and `maxHashCacheSize` stay the same ([`BuildContext::state`]).
    pub(crate) fn from_context(args: PrefixCacheArgs, ctx: &BuildContext) -> Result<Self> {
        let args = Self::validate(args)?;
        let key = format!(
            "prefix-cache/blockSizeToHash={}/maxHashCacheSize={}",
            args.block_size_to_hash, args.max_hash_cache_size
        );
        let store = ctx.state(&key, || Ok(PrefixStore::new(args.max_hash_cache_size)))?;
        Self::with_store(args, store)
    }

    fn validate(args: PrefixCacheArgs) -> Result<PrefixCacheArgs> {
        for (k, v) in [
            ("blockSizeToHash", args.block_size_to_hash),
            ("maxBlocksToMatch", args.max_blocks_to_match),
            ("maxHashCacheSize", args.max_hash_cache_size),
            ("topKMatches", args.top_k_matches),
        ] {
            if v == 0 {
                return Err(invalid("prefix-cache", format!("{k} must be > 0")));
            }
        }
        Ok(args)
    }

    /// The store (for inspection and tests).
    pub fn store(&self) -> &PrefixStore {
        &self.store
    }

    fn hashes(&self, req: &Request<'_>) -> Vec<u64> {
        let mut h = Vec::with_capacity(self.args.max_blocks_to_match.min(1024));
        prefix_block_hashes(
            req.model,
            req.prompt,
            self.args.block_size_to_hash,
            self.args.max_blocks_to_match,
            &mut h,
        );
        h
    }
}

impl ScorePlugin for PrefixCache {
    fn name(&self) -> &'static str {
        "prefix-cache"
    }

    fn score(&self, req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        let hashes = self.hashes(req);
        if hashes.is_empty() {
            out.fill(0.0);
            return ScoreNote::default();
        }
        let mut lens = vec![0u32; cands.len()];
        self.store
            .find_top_matches(&hashes, cands, self.args.top_k_matches, &mut lens);
        let mut longest = 0;
        for (o, l) in out.iter_mut().zip(&lens) {
            longest = longest.max(*l as usize);
            *o = ratio_score(*l as usize, hashes.len());
        }
        ScoreNote::with_match_ratio(longest as f64 / hashes.len() as f64)
    }

    /// The prompt's block hashes (as recorded for the chosen endpoint).
    fn completion_blocks(&self, req: &Request<'_>) -> Option<Arc<[u64]>> {
        Some(self.hashes(req).into())
    }

    fn on_scheduled(&self, req: &Request<'_>, chosen: &Candidate) {
        let hashes = self.hashes(req);
        self.store.insert_for_model(&chosen.id, req.model, &hashes);
    }

    fn stats(&self) -> PluginStats {
        PluginStats {
            cache_entries: Some(self.store.len()),
            evictions: self.store.evictions(),
        }
    }

    fn on_endpoint_removed(&self, id: &EndpointId) {
        self.store.remove(id);
    }
}
