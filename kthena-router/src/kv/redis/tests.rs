use super::*;

#[test]
fn owner_and_key_layout() {
    assert_eq!(owner_of(&EndpointId::new("prod/vllm-0")), "vllm-0.prod");
    assert_eq!(owner_of(&EndpointId::new("plain")), "plain");
    assert_eq!(block_key("qwen", 42), "matrix:kv:block:qwen@42");
    // hashlib.sha256(struct.pack(">II", 1, 2)) starts with 0f585dd518ed0644.
    assert_eq!(kthena_block_hash(&[1, 2]), 0x0f58_5dd5_18ed_0644);
    // sha256(00000001) starts with b40711a88c703975: the top bit is cleared.
    assert_eq!(kthena_block_hash(&[1]), 0x3407_11a8_8c70_3975);
}
