//! Expected values were computed with vLLM's own functions (`vllm/utils/hashing.py`:
//! `pickle.dumps(protocol=5)` / `cbor2.dumps(canonical=True)`, then `hashlib.sha256` or
//! `xxhash.xxh3_128_digest`) under CPython 3.11 for the same inputs. The check against a real
//! vLLM engine's KV events is `tests/it/vllm_hashes.rs`.

use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// 32 tokens 0, 1000, ..., 31000 in two blocks of 16.
fn tokens() -> Vec<u32> {
    (0..32).map(|i| i * 1000).collect()
}

struct Expected {
    algo: HashAlgo,
    none_hash: &'static str,
    plain: [u64; 2],
    lora_salt: [u64; 2],
    mm: u64,
    plain_second: &'static str,
}

const EXPECTED: [Expected; 4] = [
    Expected {
        algo: HashAlgo::Sha256,
        none_hash: "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c",
        plain: [15_372_306_836_907_084_216, 13_545_733_578_501_318_107],
        lora_salt: [1_870_381_455_142_200_684, 153_758_781_960_447_877],
        mm: 10_223_560_605_668_537_540,
        plain_second: "e0e2f53505d99bd350d8fe72aa2a11660840397c9d63327fbbfc1cebd8a6e5db",
    },
    Expected {
        algo: HashAlgo::Sha256Cbor,
        none_hash: "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e",
        plain: [4_022_118_954_457_290_724, 7_395_130_473_600_429_508],
        lora_salt: [743_133_524_096_434_909, 5_260_111_386_729_324_753],
        mm: 15_095_317_123_566_548_577,
        plain_second: "0dcdc495aff58ca1d0d8c1b0464bf1e360184143be288c0766a0c7fc129eadc4",
    },
    Expected {
        algo: HashAlgo::Xxhash,
        none_hash: "6fb31cc38bba6066183f7f2104b9c051",
        plain: [5_042_718_456_216_316_033, 12_347_086_971_576_521_329],
        lora_salt: [15_337_238_777_350_486_166, 11_686_291_222_198_180_817],
        mm: 5_688_854_374_901_056_372,
        plain_second: "40031210ab268f2cab59aa2ed7ac1271",
    },
    Expected {
        algo: HashAlgo::XxhashCbor,
        none_hash: "1ebe36576dcb573f26b99533a20aaeca",
        plain: [16_844_329_529_343_734_435, 1_116_743_483_434_065_221],
        lora_salt: [6_050_892_574_978_644_269, 9_710_049_683_685_813_156],
        mm: 11_997_757_738_434_744_007,
        plain_second: "4de019ba67ff33140f7f78480b51dd45",
    },
];

#[test]
fn every_algorithm_matches_vllm() {
    let t = tokens();
    for e in &EXPECTED {
        let h = BlockHasher::new(e.algo, Some("0"));
        assert_eq!(hex(h.none_hash().as_bytes()), e.none_hash, "{:?}", e.algo);
        let plain = h.block_hashes(&t, 16, RequestKeys::default());
        assert_eq!(
            plain.iter().map(BlockHash::to_u64).collect::<Vec<_>>(),
            e.plain
        );
        assert_eq!(hex(plain[1].as_bytes()), e.plain_second);
        let keys = RequestKeys {
            lora: Some("lora-a"),
            cache_salt: Some("salt"),
        };
        let lora = h.block_hashes(&t, 16, keys);
        assert_eq!(
            lora.iter().map(BlockHash::to_u64).collect::<Vec<_>>(),
            e.lora_salt
        );
        let mm = h.block_hash(
            None,
            &t[..16],
            &[
                ExtraKey::Str("lora-a".into()),
                ExtraKey::Mm {
                    identifier: "img-1".into(),
                    offset: -3,
                },
                ExtraKey::Bytes(vec![1, 2]),
            ],
        );
        assert_eq!(mm.to_u64(), e.mm, "{:?}", e.algo);
    }
}

#[test]
fn pickle_frames_split_past_64_kib() {
    let h = BlockHasher::new(HashAlgo::Sha256, Some("0"));
    // 20,000 tokens of 5 pickled bytes: the key spans two frames.
    let big = vec![70_000u32; 20_000];
    assert_eq!(
        h.block_hash(None, &big, &[]).to_u64(),
        3_130_974_126_387_687_072
    );
    // A 70,000-byte str is written outside frames.
    let small = vec![5u32; 70_000];
    let key = [ExtraKey::Str("x".repeat(70_000))];
    assert_eq!(
        h.block_hash(None, &small, &key).to_u64(),
        15_803_895_980_951_582_282
    );
}

#[test]
fn unseeded_engines_differ_and_partial_blocks_are_not_hashed() {
    let t = tokens();
    let a = BlockHasher::new(HashAlgo::Sha256, None);
    let b = BlockHasher::new(HashAlgo::Sha256, None);
    assert_eq!(a.none_hash().as_bytes().len(), 32);
    assert_ne!(a.none_hash(), b.none_hash());
    let full = a.block_hashes(&t, 16, RequestKeys::default());
    assert_eq!(
        a.block_hashes(&t[..31], 16, RequestKeys::default()),
        full[..1]
    );
    assert!(a.block_hashes(&t, 0, RequestKeys::default()).is_empty());
    // An empty salt adds no key, as in vLLM (`if request.cache_salt`).
    let salted = RequestKeys {
        lora: None,
        cache_salt: Some(""),
    };
    assert_eq!(a.block_hashes(&t, 16, salted), full);
}
