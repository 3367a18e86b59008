//! Events as a KV index consumes them (`kthena_sched::KvEvent`).

use kthena_sched::KvEvent;

use crate::Result;
use crate::wire::{BlockHash, BlockRemoved, BlockStored, Event, EventBatch};

/// One batch decoded for a KV index ([`decode_batch`]).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexBatch {
    /// Publisher timestamp, Unix seconds (0 when absent).
    pub ts: f64,
    /// The events an index can use, in order.
    pub events: Vec<KvEvent>,
    /// `data_parallel_rank`, when present.
    pub dp_rank: Option<i64>,
    /// Events skipped (see [`Event::into_index_event`]).
    pub ignored: usize,
}

/// Decodes one msgpack `EventBatch` (any form [`EventBatch::decode`] accepts) into the events
/// a KV index keyed on token ids can use; the others are counted in [`IndexBatch::ignored`].
///
/// # Errors
/// As [`EventBatch::decode`].
pub fn decode_batch(payload: &[u8]) -> Result<IndexBatch> {
    let batch = EventBatch::decode(payload)?;
    let mut out = IndexBatch {
        ts: batch.ts,
        events: Vec::with_capacity(batch.events.len()),
        dp_rank: batch.data_parallel_rank,
        ignored: 0,
    };
    for ev in batch.events {
        match ev.into_index_event() {
            Some(e) => out.events.push(e),
            None => out.ignored += 1,
        }
    }
    Ok(out)
}

/// Whether an event is about the GPU tier (or no tier) of KV-cache group 0: the blocks a
/// request can reuse.
fn primary_tier(medium: Option<&str>, group_idx: Option<u64>) -> bool {
    medium.is_none_or(|m| m.eq_ignore_ascii_case("GPU")) && group_idx.is_none_or(|g| g == 0)
}

impl Event {
    /// The event as a KV index applies it, block hashes folded to 64 bits
    /// ([`BlockHash::to_u64`]); `None` for events an index keyed on
    /// token ids cannot use: unknown types, blocks of a LoRA adapter (`lora_id` or
    /// `lora_name` set: they would match base-model requests), tiers other than `GPU`
    /// (offload connectors publish the same hashes again) and KV-cache groups other than 0
    /// (hybrid models).
    #[must_use]
    pub fn into_index_event(self) -> Option<KvEvent> {
        match self {
            Self::BlockStored(BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                lora_id,
                medium,
                lora_name,
                group_idx,
                ..
            }) => {
                if lora_id.is_some()
                    || lora_name.is_some()
                    || !primary_tier(medium.as_deref(), group_idx)
                {
                    return None;
                }
                Some(KvEvent::BlockStored {
                    block_hashes: block_hashes.iter().map(BlockHash::to_u64).collect(),
                    parent_block_hash: parent_block_hash.as_ref().map(BlockHash::to_u64),
                    token_ids,
                    block_size,
                })
            }
            Self::BlockRemoved(BlockRemoved {
                block_hashes,
                medium,
                group_idx,
            }) => primary_tier(medium.as_deref(), group_idx).then(|| KvEvent::BlockRemoved {
                block_hashes: block_hashes.iter().map(BlockHash::to_u64).collect(),
            }),
            Self::AllBlocksCleared => Some(KvEvent::AllBlocksCleared),
            Self::Unknown(_) => None,
        }
    }
}

/// The type name of an event (`"BlockStored"`, `"BlockRemoved"`, `"AllBlocksCleared"`), as a
/// metric label.
#[must_use]
pub fn event_type(e: &KvEvent) -> &'static str {
    match e {
        KvEvent::BlockStored { .. } => "BlockStored",
        KvEvent::BlockRemoved { .. } => "BlockRemoved",
        KvEvent::AllBlocksCleared => "AllBlocksCleared",
    }
}
