//! Property: every batch survives encode → decode in both vLLM encodings, and SGLang's keeps
//! the fields SGLang has.

#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use kthena_kvevents::{
    BlockHash, BlockRemoved, BlockStored, Encoding, Event, EventBatch, ExtraKey,
};
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;

fn hash() -> impl Strategy<Value = BlockHash> {
    prop_oneof![
        any::<u64>().prop_map(BlockHash::Int),
        vec(any::<u8>(), 1..40).prop_map(BlockHash::Bytes),
    ]
}

fn extra_key() -> impl Strategy<Value = ExtraKey> {
    prop_oneof![
        "[a-z]{0,6}".prop_map(ExtraKey::Str),
        ("[a-f0-9]{1,8}", any::<i64>())
            .prop_map(|(identifier, offset)| ExtraKey::Mm { identifier, offset }),
        any::<i64>().prop_map(ExtraKey::Int),
        vec(any::<u8>(), 0..8).prop_map(ExtraKey::Bytes),
    ]
}

fn stored() -> impl Strategy<Value = BlockStored> {
    (
        (
            vec(hash(), 0..4),
            of(hash()),
            vec(any::<u32>(), 0..8),
            1usize..256,
        ),
        (of(any::<i64>()), of("GPU|CPU|disk"), of("[a-z]{1,5}")),
        (
            of(vec(vec(extra_key(), 0..3), 0..3)),
            of(any::<u64>()),
            of("full_attention|sliding_window"),
            of(any::<u64>()),
        ),
    )
        .prop_map(|((h, p, t, bs), (lid, m, ln), (ek, g, k, w))| BlockStored {
            block_hashes: h,
            parent_block_hash: p,
            token_ids: t,
            block_size: bs,
            lora_id: lid,
            medium: m,
            lora_name: ln,
            extra_keys: ek,
            group_idx: g,
            kv_cache_spec_kind: k,
            kv_cache_spec_sliding_window: w,
        })
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        stored().prop_map(Event::BlockStored),
        (vec(hash(), 0..4), of("GPU|CPU"), of(any::<u64>())).prop_map(|(h, m, g)| {
            Event::BlockRemoved(BlockRemoved {
                block_hashes: h,
                medium: m,
                group_idx: g,
            })
        }),
        Just(Event::AllBlocksCleared),
        "[A-Z][a-z]{0,8}"
            .prop_filter("not a known tag", |t| {
                !matches!(
                    t.as_str(),
                    "BlockStored" | "BlockRemoved" | "AllBlocksCleared"
                )
            })
            .prop_map(Event::Unknown),
    ]
}

fn batch() -> impl Strategy<Value = EventBatch> {
    (-1e12f64..1e12, vec(event(), 0..6), of(any::<i64>())).prop_map(|(ts, events, rank)| {
        EventBatch {
            ts,
            events,
            data_parallel_rank: rank,
        }
    })
}

/// What survives SGLang's layout: hashes, parent, tokens, block size, `lora_id`.
fn sglang_view(b: &EventBatch) -> EventBatch {
    let events = b
        .events
        .iter()
        .map(|e| match e {
            Event::BlockStored(s) => Event::BlockStored(BlockStored {
                block_hashes: s.block_hashes.clone(),
                parent_block_hash: s.parent_block_hash.clone(),
                token_ids: s.token_ids.clone(),
                block_size: s.block_size,
                lora_id: s.lora_id,
                ..BlockStored::default()
            }),
            Event::BlockRemoved(r) => Event::BlockRemoved(BlockRemoved {
                block_hashes: r.block_hashes.clone(),
                ..BlockRemoved::default()
            }),
            other => other.clone(),
        })
        .collect();
    EventBatch {
        events,
        ..b.clone()
    }
}

proptest! {
    #[test]
    fn vllm_encodings_round_trip(b in batch()) {
        for encoding in [Encoding::VllmMap, Encoding::VllmArray] {
            let back = EventBatch::decode(&b.encode(encoding)).unwrap();
            prop_assert_eq!(&back, &b, "{:?}", encoding);
        }
    }

    #[test]
    fn sglang_encoding_round_trips_its_fields(b in batch()) {
        let back = EventBatch::decode(&b.encode(Encoding::Sglang)).unwrap();
        prop_assert_eq!(back, sglang_view(&b));
    }
}
