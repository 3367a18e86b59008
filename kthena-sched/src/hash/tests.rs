use super::*;

#[test]
fn token_hash_is_stable_and_matches_streaming() {
    // Long blocks go through the streaming hasher; it must agree with one-shot hashing.
    let tokens: Vec<u32> = (0..1000).collect();
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    assert_eq!(
        token_block_hash(Some(7), &tokens),
        xxh3_64_with_seed(&bytes, 7)
    );
    assert_eq!(
        token_block_hash(None, &tokens[..10]),
        xxh3_64_with_seed(&bytes[..40], TOKEN_CHAIN_ROOT)
    );
}

#[test]
fn prefix_hashes_respect_limits() {
    let mut out = vec![1, 2, 3];
    prefix_block_hashes("m", &[0u8; 1000], 64, 128, &mut out);
    assert_eq!(out.len(), 16); // ceil(1000 / 64)
    prefix_block_hashes("m", &[0u8; 100_000], 64, 128, &mut out);
    assert_eq!(out.len(), 128);
    prefix_block_hashes("m", b"", 64, 128, &mut out);
    assert!(out.is_empty());
    prefix_block_hashes("m", b"abc", 0, 128, &mut out);
    assert!(out.is_empty());
}

#[test]
fn prefix_hashes_depend_on_model() {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    prefix_block_hashes("a", b"hello", 64, 128, &mut a);
    prefix_block_hashes("b", b"hello", 64, 128, &mut b);
    assert_ne!(a, b);
}
