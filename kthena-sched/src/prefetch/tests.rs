use super::*;

#[test]
fn one_lookup_per_block_size_with_the_tokens_it_covers() {
    let tokens: Vec<u32> = (0..10).collect();
    let p = Prefetch::new("m", &tokens, &[(4, 2), (3, 100)]);
    assert_eq!(p.model(), "m");
    let [a, b] = p.lookups() else {
        panic!("two lookups")
    };
    assert_eq!((a.block_size(), a.token_ids()), (4, &tokens[..8]));
    let mut want = Vec::new();
    token_block_hashes(&tokens, 4, 2, &mut want);
    assert_eq!(a.block_hashes(), want);
    // Blocks of 3: 3 full ones and a short last one.
    assert_eq!((b.block_size(), b.token_ids().len()), (3, 10));
    assert_eq!(b.block_hashes().len(), 4);
    assert_eq!(p.longest("m").map(KvLookup::block_size), Some(3));
    assert!(p.lookup("other", 4).is_none());
    assert!(!p.is_answered());
}

#[test]
fn answers_are_capped_and_unlisted_endpoints_hold_nothing() {
    let tokens: Vec<u32> = (0..8).collect();
    let mut p = Prefetch::new("m", &tokens, &[(4, 8)]);
    let l = &mut p.lookups_mut()[0];
    assert_eq!(l.matched(&EndpointId::new("a")), 0);
    l.answer([(EndpointId::new("a"), 9), (EndpointId::new("b"), 1)]);
    assert!(p.is_answered());
    let l = &p.lookups()[0];
    assert_eq!(
        l.matched(&EndpointId::new("a")),
        2,
        "capped at the 2 blocks"
    );
    assert_eq!(l.matched(&EndpointId::new("b")), 1);
    assert_eq!(l.matched(&EndpointId::new("c")), 0);
}
