//! The weighted pick of ModelRoute targets and HTTPRoute backends: a draw `r` uniform in
//! `0..total weight`, then the items walked in order subtracting each weight until `r`
//! falls inside one (Go Kthena's `selectDestination`, `pkg/kthena-router/datastore/store.go`).

use rand::Rng;

/// The item at `draw` (0 ≤ `draw` < total weight) walking `items` in order; `None` when
/// `draw` is past the total.
pub(crate) fn pick_at<T>(items: &[(T, u32)], mut draw: u64) -> Option<&T> {
    for (item, w) in items {
        let w = u64::from(*w);
        if draw < w {
            return Some(item);
        }
        draw -= w;
    }
    None
}

/// Total weight of `items`.
pub(crate) fn total<T>(items: &[(T, u32)]) -> u64 {
    items.iter().map(|(_, w)| u64::from(*w)).sum()
}

/// A weighted random item of `items`; `None` when the total weight is 0.
pub(crate) fn pick<'a, T>(items: &'a [(T, u32)], rng: &mut impl Rng) -> Option<&'a T> {
    let total = total(items);
    if total == 0 {
        return None;
    }
    pick_at(items, rng.random_range(0..total))
}
