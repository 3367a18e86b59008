//! Chained block hashes for prompt bytes (`prefix-cache`) and token ids (`kvcache-aware`).
//!
//! Both chains use XXH3-64 from the `xxhash-rust` crate: a fast, well-known, stable
//! non-cryptographic hash (its output is fixed by the XXH3 specification and does not change
//! between versions or platforms). Chaining feeds the previous block's hash in as the XXH3
//! seed, so block `i`'s hash commits to every byte (or token) before it and no buffer is
//! concatenated:
//!
//! ```text
//! h_0 = xxh3_64_with_seed(block_0, root)
//! h_i = xxh3_64_with_seed(block_i, h_{i-1})
//! ```
//!
//! Go Kthena hashes `decimal(prev) ++ block` with XXH64; the hashes never leave the process
//! (the in-memory indexes are keyed by them), so this crate uses the faster XXH3 with the
//! previous hash as seed instead. The score formulas are unchanged.

use xxhash_rust::xxh3::{Xxh3, xxh3_64, xxh3_64_with_seed};

/// Root of the token-id chain: the hash "before" block 0 (`xxh3_64(b"kthena-token-blocks")`
/// would do as well; any fixed value works as long as every party uses the same one).
pub const TOKEN_CHAIN_ROOT: u64 = 0x6b74_6865_6e61_6b76; // "kthenakv" in ASCII

/// Number of tokens converted on the stack at once when hashing a token block.
const STACK_TOKENS: usize = 256;

/// Hashes of the byte blocks of `prompt`, chained from the hash of `model`
/// (Go Kthena `prefix_cache.go` with XXH3 instead of XXH64, see the module docs).
///
/// `prompt` is cut into blocks of `block_size` bytes (the last block may be shorter), and at
/// most `max_blocks` hashes are produced. `out` is cleared first and receives one hash per
/// block, in prompt order. An empty prompt gives no hashes; `block_size == 0` or
/// `max_blocks == 0` give none either.
///
/// ```
/// let mut a = Vec::new();
/// let mut b = Vec::new();
/// kthena_sched::prefix_block_hashes("m", b"0123456789", 4, 128, &mut a);
/// kthena_sched::prefix_block_hashes("m", b"01234567xx", 4, 128, &mut b);
/// assert_eq!(a.len(), 3);
/// assert_eq!(a[..2], b[..2]); // same first 8 bytes, same first two hashes
/// assert_ne!(a[2], b[2]);
/// ```
pub fn prefix_block_hashes(
    model: &str,
    prompt: &[u8],
    block_size: usize,
    max_blocks: usize,
    out: &mut Vec<u64>,
) {
    out.clear();
    if block_size == 0 {
        return;
    }
    let mut prev = xxh3_64(model.as_bytes());
    for block in prompt.chunks(block_size).take(max_blocks) {
        prev = xxh3_64_with_seed(block, prev);
        out.push(prev);
    }
}

/// Hash of one block of token ids chained to its parent block's hash (`None` for the first
/// block of a sequence, which chains from [`TOKEN_CHAIN_ROOT`]).
///
/// The tokens are hashed as consecutive 4-byte little-endian `u32`s with XXH3-64, seeded with
/// the parent hash. This is the function the router, the engine simulator and the
/// `kvcache-aware` index share: two parties that hash the same token blocks in the same order
/// get the same values on every platform.
///
/// ```
/// use kthena_sched::{token_block_hash, token_block_hashes};
/// let tokens = [1u32, 2, 3, 4, 5, 6];
/// let h0 = token_block_hash(None, &tokens[..3]);
/// let h1 = token_block_hash(Some(h0), &tokens[3..]);
/// let mut all = Vec::new();
/// token_block_hashes(&tokens, 3, 128, &mut all);
/// assert_eq!(all, vec![h0, h1]);
/// ```
pub fn token_block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let seed = parent.unwrap_or(TOKEN_CHAIN_ROOT);
    // Small stack buffers for common block sizes (vLLM 16, SGLang 1..64); larger blocks
    // stream through the hasher.
    match tokens.len() {
        0..=16 => xxh3_64_with_seed(fill_le::<64>(&mut [0; 64], tokens), seed),
        17..=64 => xxh3_64_with_seed(fill_le::<256>(&mut [0; 256], tokens), seed),
        65..=STACK_TOKENS => xxh3_64_with_seed(
            fill_le::<{ STACK_TOKENS * 4 }>(&mut [0; STACK_TOKENS * 4], tokens),
            seed,
        ),
        _ => {
            let mut buf = [0u8; STACK_TOKENS * 4];
            let mut hasher = Xxh3::with_seed(seed);
            for part in tokens.chunks(STACK_TOKENS) {
                hasher.update(fill_le(&mut buf, part));
            }
            hasher.digest()
        }
    }
}

/// Chained hashes of the token blocks of `tokens`: blocks of `block_size` tokens (the last may
/// be shorter), at most `max_blocks` of them, each hashed with [`token_block_hash`] chained to
/// the previous one. `out` is cleared first. `block_size == 0` gives no hashes.
pub fn token_block_hashes(
    tokens: &[u32],
    block_size: usize,
    max_blocks: usize,
    out: &mut Vec<u64>,
) {
    out.clear();
    if block_size == 0 {
        return;
    }
    let mut prev = None;
    for block in tokens.chunks(block_size).take(max_blocks) {
        let h = token_block_hash(prev, block);
        out.push(h);
        prev = Some(h);
    }
}

/// Writes `tokens` (at most `N / 4`) as little-endian bytes into `buf`; returns the written part.
fn fill_le<'b, const N: usize>(buf: &'b mut [u8; N], tokens: &[u32]) -> &'b [u8] {
    for (dst, t) in buf.chunks_exact_mut(4).zip(tokens) {
        dst.copy_from_slice(&t.to_le_bytes());
    }
    &buf[..tokens.len() * 4]
}

#[cfg(test)]
mod tests;
