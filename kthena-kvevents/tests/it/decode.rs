//! Decoding hand-built payloads (every form, missing and extra fields, malformed input) and
//! round trips through every encoding.

#![cfg(feature = "sched")]
#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use kthena_kvevents::{
    BlockHash, BlockRemoved, BlockStored, Encoding, Error, Event, EventBatch, ExtraKey,
    decode_batch,
};
use kthena_sched::KvEvent;
use rmpv::Value;

fn s(v: &str) -> Value {
    Value::from(v)
}

fn enc(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).unwrap();
    out
}

#[test]
fn decodes_array_events_with_missing_and_extra_fields() {
    let stored = Value::Array(vec![
        s("BlockStored"),
        Value::Array(vec![Value::from(1u64), Value::from(-2i64)]),
        Value::Nil,
        Value::Array((0..4u32).map(Value::from).collect()),
        Value::from(2),
    ]);
    let removed = Value::Array(vec![
        s("BlockRemoved"),
        Value::Array(vec![Value::from(u64::MAX)]),
        s("GPU"),
        Value::from(0),
        s("extra"),
    ]);
    let batch = Value::Array(vec![
        Value::F64(1.5),
        Value::Array(vec![stored, removed, Value::Array(vec![s("Fancy")])]),
    ]);
    let b = decode_batch(&enc(&batch)).unwrap();
    assert_eq!(b.ts, 1.5);
    assert_eq!(b.dp_rank, None);
    assert_eq!(b.ignored, 1);
    assert_eq!(
        b.events,
        vec![
            KvEvent::BlockStored {
                block_hashes: vec![1, (-2i64) as u64],
                parent_block_hash: None,
                token_ids: vec![0, 1, 2, 3],
                block_size: 2
            },
            KvEvent::BlockRemoved {
                block_hashes: vec![u64::MAX]
            },
        ]
    );
    let full = EventBatch::decode(&enc(&batch)).unwrap();
    assert_eq!(full.events[2], Event::Unknown("Fancy".to_owned()));
}

#[test]
fn decodes_map_batch_and_byte_hashes() {
    let mut digest = vec![0u8; 24];
    digest.extend_from_slice(&7u64.to_be_bytes());
    let ev = Value::Map(vec![
        (s("type"), s("BlockStored")),
        (s("block_hashes"), Value::Array(vec![Value::Binary(digest)])),
        (s("parent_block_hash"), Value::from(9)),
        (
            s("token_ids"),
            Value::Array(vec![Value::from(5), Value::from(6)]),
        ),
        (s("block_size"), Value::from(2)),
        (s("future_field"), Value::Map(vec![])),
    ]);
    let batch = Value::Map(vec![
        (s("ts"), Value::from(3)),
        (
            s("events"),
            Value::Array(vec![
                ev,
                Value::Map(vec![(s("type"), s("AllBlocksCleared"))]),
            ]),
        ),
        (s("data_parallel_rank"), Value::from(1)),
    ]);
    let b = decode_batch(&enc(&batch)).unwrap();
    assert_eq!(b.ts, 3.0);
    assert_eq!(b.dp_rank, Some(1));
    assert_eq!(
        b.events,
        vec![
            KvEvent::BlockStored {
                block_hashes: vec![7],
                parent_block_hash: Some(9),
                token_ids: vec![5, 6],
                block_size: 2
            },
            KvEvent::AllBlocksCleared
        ]
    );
}

#[test]
fn skips_lora_offload_and_other_groups() {
    let base = |extra: (&str, Value)| {
        Value::Map(vec![
            (s("type"), s("BlockStored")),
            (s("block_hashes"), Value::Array(vec![Value::from(1)])),
            (s("parent_block_hash"), Value::Nil),
            (s("token_ids"), Value::Array(vec![Value::from(1)])),
            (s("block_size"), Value::from(1)),
            (s(extra.0), extra.1),
        ])
    };
    let removed_cpu = Value::Array(vec![
        s("BlockRemoved"),
        Value::Array(vec![Value::from(1)]),
        s("CPU"),
    ]);
    let batch = Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![
            base(("lora_name", s("sql"))),
            base(("lora_id", Value::from(3))),
            base(("medium", s("CPU"))),
            base(("group_idx", Value::from(1))),
            removed_cpu,
            base(("medium", s("gpu"))),
        ]),
    ]);
    let b = decode_batch(&enc(&batch)).unwrap();
    assert_eq!((b.events.len(), b.ignored), (1, 5));
}

#[test]
fn rejects_malformed_input() {
    // Truncated: an array of 2 whose float64 has no bytes.
    assert!(matches!(
        EventBatch::decode(b"\x92\xcb"),
        Err(Error::Msgpack(_))
    ));
    assert!(EventBatch::decode(b"\xc1").is_err());
    let field = |v: &Value| match EventBatch::decode(&enc(v)) {
        Err(Error::Field {
            event,
            field,
            found,
            ..
        }) => (event, field, found),
        other => panic!("expected a field error, got {other:?}"),
    };
    assert_eq!(field(&Value::from(3)), (None, "batch", "int"));
    assert_eq!(
        field(&Value::Array(vec![Value::F64(0.0)])),
        (None, "events", "missing")
    );
    let bad_hash = Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![
            Value::Array(vec![s("AllBlocksCleared")]),
            Value::Array(vec![s("BlockRemoved"), Value::Array(vec![s("x")])]),
        ]),
    ]);
    assert_eq!(field(&bad_hash), (Some(1), "block_hashes", "str"));
    let err = EventBatch::decode(&enc(&bad_hash)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "event 1: block_hashes is str, expected int or non-empty bytes"
    );
    let no_tokens = Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![Value::Array(vec![
            s("BlockStored"),
            Value::Array(vec![]),
            Value::Nil,
        ])]),
    ]);
    assert_eq!(field(&no_tokens), (Some(0), "token_ids", "missing"));
    let untagged = Value::Array(vec![
        Value::F64(0.0),
        Value::Array(vec![Value::Array(vec![])]),
    ]);
    assert_eq!(field(&untagged), (Some(0), "type", "missing"));
    let mut two = enc(&Value::Array(vec![Value::F64(0.0), Value::Array(vec![])]));
    two.push(0xc0);
    assert!(matches!(
        EventBatch::decode(&two),
        Err(Error::TrailingBytes(1))
    ));
}

/// A batch with every field set, as a simulator would publish it.
fn full_batch(hash: fn(u64) -> BlockHash) -> EventBatch {
    EventBatch {
        ts: 1_796_000_000.125,
        events: vec![
            Event::BlockStored(BlockStored {
                block_hashes: vec![hash(1), hash(u64::MAX)],
                parent_block_hash: Some(hash(9)),
                token_ids: vec![1, 2, 3, 70_000],
                block_size: 2,
                lora_id: None,
                medium: Some("GPU".to_owned()),
                lora_name: Some("sql".to_owned()),
                extra_keys: Some(vec![
                    vec![],
                    vec![
                        ExtraKey::Str("salt".to_owned()),
                        ExtraKey::Mm {
                            identifier: "img0".to_owned(),
                            offset: 3,
                        },
                        ExtraKey::Int(-4),
                        ExtraKey::Bytes(vec![1, 2]),
                    ],
                ]),
                group_idx: Some(0),
                kv_cache_spec_kind: Some("full_attention".to_owned()),
                kv_cache_spec_sliding_window: Some(4096),
            }),
            Event::BlockRemoved(BlockRemoved {
                block_hashes: vec![hash(1)],
                medium: Some("GPU".to_owned()),
                group_idx: Some(0),
            }),
            Event::AllBlocksCleared,
            Event::Unknown("Future".to_owned()),
        ],
        data_parallel_rank: Some(2),
    }
}

#[test]
fn vllm_encodings_round_trip() {
    let bytes = |v: u64| {
        let mut d = vec![0xab; 24];
        d.extend_from_slice(&v.to_be_bytes());
        BlockHash::Bytes(d)
    };
    for hash in [BlockHash::Int as fn(u64) -> BlockHash, bytes] {
        let batch = full_batch(hash);
        for encoding in [Encoding::VllmMap, Encoding::VllmArray] {
            let payload = batch.encode(encoding);
            assert_eq!(EventBatch::decode(&payload).unwrap(), batch, "{encoding:?}");
        }
        // Folded hashes are the same whatever the hash form.
        let index = decode_batch(&batch.encode(Encoding::VllmMap)).unwrap();
        assert_eq!(index.ignored, 2, "the LoRA block and the unknown event");
        assert_eq!(
            index.events[0],
            KvEvent::BlockRemoved {
                block_hashes: vec![1]
            }
        );
    }
}

#[test]
fn sglang_encoding_keeps_its_fields_only() {
    let batch = full_batch(BlockHash::Int);
    let payload = batch.encode(Encoding::Sglang);
    let v = rmpv::decode::read_value(&mut payload.as_slice()).unwrap();
    let events = v.as_array().unwrap()[1].as_array().unwrap();
    assert_eq!(events[0].as_array().unwrap().len(), 6);
    assert_eq!(events[1].as_array().unwrap().len(), 2);
    // u64::MAX is -1 for SGLang.
    assert_eq!(
        events[0].as_array().unwrap()[1].as_array().unwrap()[1].as_i64(),
        Some(-1)
    );
    let back = EventBatch::decode(&payload).unwrap();
    let Event::BlockStored(b) = &back.events[0] else {
        panic!("expected BlockStored");
    };
    assert_eq!(
        b.block_hashes,
        vec![BlockHash::Int(1), BlockHash::Int(u64::MAX)]
    );
    assert_eq!((b.medium.as_deref(), b.lora_name.as_deref()), (None, None));
    assert_eq!(back.data_parallel_rank, Some(2));
}

#[test]
fn map_encoding_has_vllm_key_order() {
    let mut batch = full_batch(BlockHash::Int);
    batch.events.truncate(2);
    if let Event::BlockStored(b) = &mut batch.events[0] {
        b.kv_cache_spec_sliding_window = None;
    }
    let payload = batch.encode(Encoding::VllmMap);
    let v = rmpv::decode::read_value(&mut payload.as_slice()).unwrap();
    let events = v.as_array().unwrap()[1].as_array().unwrap();
    let keys = |e: &Value| -> Vec<String> {
        e.as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_owned())
            .collect()
    };
    // Same keys, same order as the captured vLLM 0.32 frame.
    assert_eq!(
        keys(&events[0]),
        [
            "type",
            "block_hashes",
            "parent_block_hash",
            "token_ids",
            "block_size",
            "lora_id",
            "medium",
            "lora_name",
            "extra_keys",
            "group_idx",
            "kv_cache_spec_kind"
        ]
    );
    assert_eq!(
        keys(&events[1]),
        ["type", "block_hashes", "medium", "group_idx"]
    );
    // fixarray(3), float64 ts, fixarray(2), fixmap(11).
    assert_eq!(
        (payload[0], payload[1], payload[10], payload[11]),
        (0x93, 0xcb, 0x92, 0x8b)
    );
}
