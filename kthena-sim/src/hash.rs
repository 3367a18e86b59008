//! Chained token-block hashes: the prefix-cache keys and the `block_hashes` of KV events.
//!
//! The chain is `kthena_sched::token_block_hash`, the function the router's `kvcache-aware`
//! index uses too, so hashes published in KV events match what the router computes from the
//! same token ids:
//!
//! ```text
//! h_0 = token_block_hash(None, block_0)          // chained from kthena_sched::TOKEN_CHAIN_ROOT
//! h_i = token_block_hash(Some(h_{i-1}), block_i)
//! ```
//!
//! Blocks of a LoRA request chain from `token_block_hash(None, lora name bytes as u32s)`
//! instead, so the same tokens under different adapters never share cache entries (vLLM puts
//! the LoRA name in the block's extra keys for the same reason). Only full blocks are hashed.
//! Like vLLM, the chain has one structure (parent hash + block tokens + extra keys); unlike
//! vLLM it uses XXH3 and no per-process random root, so every engine agrees.

use kthena_sched::token_block_hash;

/// The parent to use for the first block of a sequence under `lora`.
fn chain_start(lora: Option<&str>) -> Option<u64> {
    lora.map(|name| {
        let salt: Vec<u32> = name.bytes().map(u32::from).collect();
        token_block_hash(None, &salt)
    })
}

/// Hash of one full block given its parent's hash (`None` for the first block).
#[must_use]
pub fn block_hash(parent: Option<u64>, tokens: &[u32], lora: Option<&str>) -> u64 {
    token_block_hash(parent.or_else(|| chain_start(lora)), tokens)
}

/// Hashes of every full block of `tokens` (a trailing partial block is not hashed), chained as
/// described in the module docs. Returns `tokens.len() / block_size` hashes; empty if
/// `block_size == 0`.
#[must_use]
pub fn prompt_block_hashes(tokens: &[u32], block_size: usize, lora: Option<&str>) -> Vec<u64> {
    if block_size == 0 {
        return Vec::new();
    }
    let mut parent = None;
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            let h = block_hash(parent, block, lora);
            parent = Some(h);
            h
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
        let ha = prompt_block_hashes(&a, 16, None);
        let hb = prompt_block_hashes(&b, 16, None);
        assert_eq!(ha.len(), 3);
        // A change in the first block changes every later hash (chaining).
        assert!(ha.iter().zip(&hb).all(|(x, y)| x != y));
        assert_ne!(ha, prompt_block_hashes(&a, 16, Some("lora-a")));
        // A trailing partial block is not hashed; full blocks keep their hashes.
        assert_eq!(prompt_block_hashes(&a[..40], 16, None), ha[..2]);
        // Identical to the scheduler crate's chain without LoRA.
        let mut sched = Vec::new();
        kthena_sched::token_block_hashes(&a, 16, 128, &mut sched);
        assert_eq!(ha, sched);
    }
}
