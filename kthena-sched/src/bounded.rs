//! A bounded LRU insert shared by the indexes.

/// `LruCache::push` with a capacity enforced here, so an unbounded cache (which does not
/// pre-allocate `cap` slots as `LruCache::new` does) stays within `cap` entries. Returns the
/// replaced entry (same key) or the evicted least-recently-used one.
pub(crate) fn push_bounded<K: std::hash::Hash + Eq + Copy, V, S: std::hash::BuildHasher>(
    lru: &mut lru::LruCache<K, V, S>,
    cap: usize,
    k: K,
    v: V,
) -> Option<(K, V)> {
    if lru.contains(&k) {
        return lru.push(k, v);
    }
    let evicted = if lru.len() >= cap {
        lru.pop_lru()
    } else {
        None
    };
    lru.put(k, v);
    evicted
}
