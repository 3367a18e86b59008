use super::*;

#[test]
fn map_encoding_matches_the_vllm_sample_layout() {
    let ev = KvEvent::BlockStored {
        block_hashes: vec![
            BlockHash::from_digest(&[1; 32]),
            BlockHash::from_digest(&[2; 32]),
        ],
        parent_block_hash: None,
        token_ids: vec![7; 4],
        block_size: 2,
        lora_name: None,
        extra_keys: vec![vec![], vec![]],
    };
    let bytes = encode_batch(1.5, &[ev], KvEventsFormat::Map, true);
    let v = rmpv::decode::read_value(&mut bytes.as_slice()).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    assert_eq!(arr[0].as_f64(), Some(1.5));
    let ev = &arr[1].as_array().unwrap()[0];
    let keys: Vec<&str> = ev
        .as_map()
        .unwrap()
        .iter()
        .map(|(k, _)| k.as_str().unwrap())
        .collect();
    // Same keys, same order as the captured vLLM 0.32 frame (kv-events.json).
    assert_eq!(
        keys,
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
    // The captured frame starts with fixarray(3), float64 ts, fixarray(1), fixmap(11).
    assert_eq!(bytes[0], 0x93);
    assert_eq!(bytes[1], 0xcb);
    assert_eq!(bytes[10], 0x91);
    assert_eq!(bytes[11], 0x8b);
}

#[test]
fn replay_buffer_answers_from_a_sequence_number_and_keeps_the_newest() {
    let mut b = replay::ReplayBuffer::new(3);
    for seq in 0..5u64 {
        b.push(seq, Bytes::from(vec![seq as u8]));
    }
    let seq = |n: u64| Bytes::copy_from_slice(&n.to_be_bytes());
    let end = [Bytes::from_static(&kthena_kvevents::END_SEQ), Bytes::new()];
    assert_eq!(
        b.answer(0),
        vec![
            [seq(2), Bytes::from_static(&[2])],
            [seq(3), Bytes::from_static(&[3])],
            [seq(4), Bytes::from_static(&[4])],
            end.clone(),
        ]
    );
    assert_eq!(
        b.answer(4),
        vec![[seq(4), Bytes::from_static(&[4])], end.clone()]
    );
    assert_eq!(b.answer(9), vec![end]);
}
