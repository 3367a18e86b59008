//! Real engine payloads: the frames captured from vLLM 0.32 (`spec/samples/vllm-0.32-cpu/`)
//! and msgspec encodings with SGLang's and old vLLM's own struct definitions
//! (`tests/data/gen_fixtures.py`), decoded with exact values and re-encoded.

#![cfg(feature = "sched")]
#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use std::path::PathBuf;

use base64::Engine as _;
use kthena_kvevents::{
    BlockHash, BlockRemoved, BlockStored, Encoding, Event, EventBatch, decode_batch, split_frames,
};
use kthena_sched::KvEvent;

/// `spec/samples/vllm-0.32-cpu`, found next to the checkout first.
fn vllm_samples() -> PathBuf {
    let local =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/spec/samples/vllm-0.32-cpu");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/spec/samples/vllm-0.32-cpu")
    }
}

/// The frames of a capture file: `[{topic, seq_be_u64_hex, payload_msgpack_b64}]`.
fn frames(path: PathBuf) -> Vec<[Vec<u8>; 3]> {
    let text = std::fs::read_to_string(path).unwrap();
    let list: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    list.iter()
        .map(|f| {
            let seq = f["seq_be_u64_hex"].as_str().unwrap();
            let seq: Vec<u8> = (0..seq.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&seq[i..i + 2], 16).unwrap())
                .collect();
            let payload = base64::engine::general_purpose::STANDARD
                .decode(f["payload_msgpack_b64"].as_str().unwrap())
                .unwrap();
            [
                f["topic"].as_str().unwrap().as_bytes().to_vec(),
                seq,
                payload,
            ]
        })
        .collect()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The captured vLLM 0.32 frame: an array batch holding one map event of 5 blocks of 128.
#[test]
fn vllm_032_capture() {
    let msg = frames(vllm_samples().join("kv-events.json"));
    assert_eq!(msg.len(), 1);
    let (topic, seq, payload) = split_frames(&msg[0]).unwrap();
    assert_eq!(topic.as_slice(), b"kv@127.0.0.1@tiny-qwen3");
    assert_eq!(seq, 2);
    let batch = EventBatch::decode(payload).unwrap();
    assert_eq!(batch.ts, 1_796_038_385.906_672_2);
    assert_eq!(batch.data_parallel_rank, Some(0));
    let [Event::BlockStored(b)] = batch.events.as_slice() else {
        panic!("expected one BlockStored, got {:?}", batch.events);
    };
    let hashes: Vec<u64> = b.block_hashes.iter().map(BlockHash::to_u64).collect();
    assert_eq!(
        hashes,
        [
            5_078_055_017_064_626_078,
            5_150_441_231_259_576_797,
            1_003_423_022_493_429_422,
            14_657_971_117_197_887_257,
            1_897_865_283_679_170_430
        ]
    );
    assert_eq!(b.parent_block_hash, None);
    assert_eq!(b.block_size, 128);
    assert_eq!(b.token_ids.len(), 640);
    assert_eq!(b.token_ids[..4], [4340, 83165, 11307, 3974]);
    assert_eq!(b.token_ids[639], 0);
    assert_eq!((b.lora_id, b.lora_name.as_deref()), (None, None));
    assert_eq!(b.medium.as_deref(), Some("GPU"));
    assert_eq!(b.extra_keys, Some(vec![vec![]; 5]));
    assert_eq!(b.group_idx, Some(0));
    assert_eq!(b.kv_cache_spec_kind.as_deref(), Some("full_attention"));
    assert_eq!(b.kv_cache_spec_sliding_window, None);

    // Re-encoding reproduces vLLM's bytes exactly.
    assert_eq!(&batch.encode(Encoding::VllmMap), payload);

    let index = decode_batch(payload).unwrap();
    assert_eq!((index.events.len(), index.ignored), (1, 0));
    let KvEvent::BlockStored {
        block_hashes,
        parent_block_hash,
        block_size,
        ..
    } = &index.events[0]
    else {
        panic!("expected BlockStored");
    };
    assert_eq!(
        (block_hashes, *parent_block_hash, *block_size),
        (&hashes, None, 128)
    );
}

/// SGLang's tagged arrays: `[ts, events]`, signed hashes, `lora_id` last, no `medium`.
#[test]
fn sglang_msgspec_batch() {
    let msg = frames(fixture("sglang-kv-events.json"));
    let (topic, seq, payload) = split_frames(&msg[0]).unwrap();
    assert_eq!((topic.as_slice(), seq), (&b"kv@10.0.0.7@qwen3"[..], 0));
    let batch = EventBatch::decode(payload).unwrap();
    let neg = (-6_917_529_027_641_081_856i64) as u64;
    let half = 4_611_686_018_427_387_904u64;
    assert_eq!(
        batch,
        EventBatch {
            ts: 1_796_040_000.25,
            events: vec![
                Event::BlockStored(BlockStored {
                    block_hashes: vec![BlockHash::Int(neg), BlockHash::Int(half)],
                    token_ids: (101..=108).collect(),
                    block_size: 4,
                    ..BlockStored::default()
                }),
                Event::BlockStored(BlockStored {
                    block_hashes: vec![BlockHash::Int(u64::MAX)],
                    parent_block_hash: Some(BlockHash::Int(half)),
                    token_ids: (109..=112).collect(),
                    block_size: 4,
                    ..BlockStored::default()
                }),
                Event::BlockRemoved(BlockRemoved {
                    block_hashes: vec![BlockHash::Int(neg)],
                    ..BlockRemoved::default()
                }),
                Event::AllBlocksCleared,
            ],
            data_parallel_rank: None,
        }
    );
    assert_eq!(&batch.encode(Encoding::Sglang), payload);
    let index = decode_batch(payload).unwrap();
    assert_eq!(
        (index.events.len(), index.ignored, index.dp_rank),
        (4, 0, None)
    );
    assert_eq!(
        index.events[1],
        KvEvent::BlockStored {
            block_hashes: vec![u64::MAX],
            parent_block_hash: Some(half),
            token_ids: vec![109, 110, 111, 112],
            block_size: 4,
        }
    );
}

/// vLLM's original array events: `medium` last, a bytes hash, a CPU-tier block.
#[test]
fn vllm_array_msgspec_batch() {
    let msg = frames(fixture("vllm-array-kv-events.json"));
    let (_, seq, payload) = split_frames(&msg[0]).unwrap();
    assert_eq!(seq, 7);
    let batch = EventBatch::decode(payload).unwrap();
    assert_eq!(
        (batch.ts, batch.data_parallel_rank),
        (1_796_040_001.5, Some(1))
    );
    let mut digest = vec![0u8; 24];
    digest.extend_from_slice(&7u64.to_be_bytes());
    assert_eq!(
        batch.events[0],
        Event::BlockStored(BlockStored {
            block_hashes: vec![BlockHash::Int(u64::MAX), BlockHash::Bytes(digest)],
            token_ids: vec![1, 2, 3, 4],
            block_size: 2,
            medium: Some("GPU".to_owned()),
            ..BlockStored::default()
        })
    );
    // Re-encoded (with `lora_name` now present) it decodes to the same batch.
    let again = batch.encode(Encoding::VllmArray);
    assert_eq!(EventBatch::decode(&again).unwrap(), batch);

    let index = decode_batch(payload).unwrap();
    assert_eq!((index.dp_rank, index.ignored), (Some(1), 1));
    assert_eq!(
        index.events,
        vec![
            KvEvent::BlockStored {
                block_hashes: vec![u64::MAX, 7],
                parent_block_hash: None,
                token_ids: vec![1, 2, 3, 4],
                block_size: 2,
            },
            KvEvent::BlockRemoved {
                block_hashes: vec![5]
            },
            KvEvent::AllBlocksCleared,
        ]
    );
}
