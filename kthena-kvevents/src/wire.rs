//! The types of one msgpack `EventBatch`, with every field the engines send.

/// One decoded or to-be-encoded `EventBatch` (vLLM's `EventBatch`, SGLang's `KVEventBatch`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventBatch {
    /// Publisher timestamp, Unix seconds (0 when absent or nil).
    pub ts: f64,
    /// The events, in the order the engine emitted them.
    pub events: Vec<Event>,
    /// `data_parallel_rank` (vLLM) or `attn_dp_rank` (SGLang), when present.
    pub data_parallel_rank: Option<i64>,
}

/// One KV-cache event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Full blocks became cached (reusable by a prefix hit).
    BlockStored(BlockStored),
    /// Blocks were evicted.
    BlockRemoved(BlockRemoved),
    /// The engine dropped its whole prefix cache (for example after a reset).
    AllBlocksCleared,
    /// An event type this crate does not know, by its tag; its fields are dropped.
    Unknown(String),
}

/// A `BlockStored` event: `block_hashes.len()` consecutive full blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockStored {
    /// Engine hashes of the stored blocks, in chain order.
    pub block_hashes: Vec<BlockHash>,
    /// Hash of the block before the first stored one; `None` for the start of a sequence.
    pub parent_block_hash: Option<BlockHash>,
    /// Token ids of all stored blocks, concatenated (`block_size` per block).
    pub token_ids: Vec<u32>,
    /// Tokens per block.
    pub block_size: usize,
    /// LoRA adapter id (deprecated by vLLM in favour of `lora_name`; SGLang still sends it).
    pub lora_id: Option<i64>,
    /// Storage tier, e.g. `"GPU"` or `"CPU"` (offload connectors publish the same hashes
    /// again for their tier). Absent from SGLang.
    pub medium: Option<String>,
    /// LoRA adapter name.
    pub lora_name: Option<String>,
    /// Each block's hash extra keys, one entry per block (an empty entry is nil on the wire);
    /// `None` when absent, or in a shape this crate does not know.
    pub extra_keys: Option<Vec<Vec<ExtraKey>>>,
    /// KV-cache group of hybrid models (0 for the full-attention group).
    pub group_idx: Option<u64>,
    /// Kind of the group's KV-cache spec, e.g. `"full_attention"`.
    pub kv_cache_spec_kind: Option<String>,
    /// Sliding window of the group's spec, tokens.
    pub kv_cache_spec_sliding_window: Option<u64>,
}

/// A `BlockRemoved` event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockRemoved {
    /// Engine hashes of the evicted blocks.
    pub block_hashes: Vec<BlockHash>,
    /// Storage tier the blocks left, e.g. `"GPU"`. Absent from SGLang.
    pub medium: Option<String>,
    /// KV-cache group of hybrid models.
    pub group_idx: Option<u64>,
}

/// A block hash as sent (`ExternalBlockHash = int | bytes`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BlockHash {
    /// An integer hash: vLLM's default (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`, the low 64
    /// bits of the SHA-256 block digest), TRT-LLM, SGLang. A negative integer (SGLang's Python
    /// hashes) is held as its two's-complement bits.
    Int(u64),
    /// The block digest's bytes (vLLM with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`).
    Bytes(Vec<u8>),
}

impl BlockHash {
    /// The 64-bit value a KV index keys on: the integer itself, or a digest's last 8 bytes
    /// read big-endian (left-padded with zeros when shorter), which is the integer vLLM sends
    /// for the same block with int hashes on.
    #[must_use]
    pub fn to_u64(&self) -> u64 {
        match self {
            Self::Int(v) => *v,
            Self::Bytes(b) => {
                let mut tail = [0u8; 8];
                let n = b.len().min(8);
                tail[8 - n..].copy_from_slice(&b[b.len() - n..]);
                u64::from_be_bytes(tail)
            }
        }
    }
}

/// One of a block's hash extra keys (vLLM's `extra_keys`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExtraKey {
    /// A string key: a LoRA name or a cache salt.
    Str(String),
    /// A multimodal item: `[identifier, offset]`, the offset in tokens.
    Mm {
        /// The item's identifier (its content hash).
        identifier: String,
        /// Where the item starts in the block, tokens.
        offset: i64,
    },
    /// An integer key.
    Int(i64),
    /// A byte-string key.
    Bytes(Vec<u8>),
}

/// How [`EventBatch::encode`] lays a batch out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// vLLM 0.32 and later: an array batch of map events with a `type` key, every field
    /// present (nil when unset), in vLLM's order; `kv_cache_spec_sliding_window` only when set.
    VllmMap,
    /// vLLM before PR #42892: an array batch of positional array events. `BlockStored` always
    /// carries fields up to `lora_name`, `BlockRemoved` up to `medium`; later fields up to the
    /// last one set.
    VllmArray,
    /// SGLang: positional array events with SGLang's fields only (`BlockStored` up to
    /// `lora_id`, `BlockRemoved` its hashes), integer hashes as signed 64-bit.
    Sglang,
}
