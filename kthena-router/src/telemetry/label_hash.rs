//! `Hash` for the label sets of metric families recorded on every request.
//!
//! `prometheus-client`'s families keep their series in a std `HashMap` (SipHash), which
//! would read every label string of a set on each lookup; [`folded_hash`] makes a set hash
//! as one `u64` instead.

/// `Hash` for a label set recorded on every request: its fields folded into one `u64` by
/// foldhash with a fixed seed, which the family's map (std's SipHash, fixed by
/// `prometheus-client`) then hashes as 8 bytes instead of every label string. Equal label
/// sets fold to equal values, as `Hash` must agree with `Eq`.
macro_rules! folded_hash {
    ($t:ty: $($field:ident),+) => {
        impl std::hash::Hash for $t {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                use std::hash::{BuildHasher as _, Hasher as _};
                let mut h = foldhash::fast::FixedState::default().build_hasher();
                $(std::hash::Hash::hash(&self.$field, &mut h);)+
                state.write_u64(h.finish());
            }
        }
    };
}

pub(crate) use folded_hash;
