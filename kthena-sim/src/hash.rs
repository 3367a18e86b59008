//! Chained token-block hashes, in the shape of vLLM's prefix-cache keys.
//!
//! vLLM hashes each full block as `H(parent_hash, token_ids, extra_keys)` with SHA-256 and, for
//! KV events, publishes the low 64 bits of the digest (the last 8 bytes, big-endian;
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`, `engines-and-peers.md` §5.5). The chain starts from
//! a root `NONE_HASH` that is random unless seeded. We keep that structure with a fixed byte
//! layout instead of Python's CBOR/pickle serialisation:
//!
//! ```text
//! root        = low64(SHA-256("kthena-sim-none-hash" || seed as 8 B big-endian))
//! hash(block) = low64(SHA-256(parent as 8 B BE || each token id as 4 B BE || lora name UTF-8))
//! ```
//!
//! so the same tokens, LoRA and seed always give the same hashes, in any process.

use sha2::{Digest, Sha256};

fn low64(digest: &[u8]) -> u64 {
    let mut tail = [0u8; 8];
    tail.copy_from_slice(&digest[digest.len() - 8..]);
    u64::from_be_bytes(tail)
}

/// The root of the hash chain (vLLM's `NONE_HASH`) for `seed`.
#[must_use]
pub fn root_hash(seed: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(b"kthena-sim-none-hash");
    h.update(seed.to_be_bytes());
    low64(&h.finalize())
}

/// Hash of one full block given its parent's hash (or [`root_hash`] for the first block).
#[must_use]
pub fn block_hash(parent: u64, tokens: &[u32], lora: Option<&str>) -> u64 {
    let mut h = Sha256::new();
    h.update(parent.to_be_bytes());
    for t in tokens {
        h.update(t.to_be_bytes());
    }
    if let Some(name) = lora {
        h.update(name.as_bytes());
    }
    low64(&h.finalize())
}

/// Hashes of every full block of `tokens` (a trailing partial block is not hashed), chained
/// from `root_hash(seed)`. Returns `tokens.len() / block_size` hashes; empty if
/// `block_size == 0`.
#[must_use]
pub fn prompt_block_hashes(
    seed: u64,
    tokens: &[u32],
    block_size: usize,
    lora: Option<&str>,
) -> Vec<u64> {
    if block_size == 0 {
        return Vec::new();
    }
    let mut parent = root_hash(seed);
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            parent = block_hash(parent, block, lora);
            parent
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_depends_on_prefix_and_lora() {
        let a: Vec<u32> = (0..48).collect();
        let mut b = a.clone();
        b[0] = 999;
        let ha = prompt_block_hashes(0, &a, 16, None);
        let hb = prompt_block_hashes(0, &b, 16, None);
        assert_eq!(ha.len(), 3);
        // A change in the first block changes every later hash (chaining).
        assert!(ha.iter().zip(&hb).all(|(x, y)| x != y));
        assert_ne!(ha, prompt_block_hashes(0, &a, 16, Some("lora-a")));
        assert_ne!(ha, prompt_block_hashes(1, &a, 16, None));
        // A trailing partial block is not hashed; full blocks keep their hashes.
        assert_eq!(prompt_block_hashes(0, &a[..40], 16, None), ha[..2]);
    }
}
