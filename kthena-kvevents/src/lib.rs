//! The KV-cache event wire format of vLLM and SGLang, without I/O (by default).
//!
//! Engines with prefix caching publish the blocks they store and evict over a ZMQ PUB socket
//! (vLLM: `vllm-project/vllm` `vllm/distributed/kv_events.py`). This crate decodes those messages for hosts that keep
//! a KV index (a router, a gateway) and encodes them for engines and simulators. By default
//! it works on frames and bytes, without I/O; the optional `subscribe` feature adds the SUB
//! socket loop (`subscribe`, reconnecting with backoff) for hosts on tokio.
//!
//! # Messages
//!
//! Each ZMQ message has three frames `[topic, seq, payload]` ([`split_frames`]). `seq` is an
//! 8-byte big-endian counter, monotonic per publisher ([`SeqTracker`] classifies it). `payload`
//! is a msgpack [`EventBatch`]:
//!
//! | form | batch | events |
//! |---|---|---|
//! | vLLM 0.32 and later ([`Encoding::VllmMap`]) | `[ts, [event, ...], data_parallel_rank]` | maps with a `type` key |
//! | vLLM before PR #42892 ([`Encoding::VllmArray`]) | `[ts, [event, ...], data_parallel_rank]` | positional arrays tagged by their first element |
//! | SGLang ([`Encoding::Sglang`]) | `[ts, [event, ...], attn_dp_rank?]` | positional arrays, SGLang's fields only |
//!
//! The decoder also accepts a batch as a map `{ts, events, data_parallel_rank}` and any mix of
//! event forms. Event layouts (positions for arrays, keys for maps):
//!
//! | event | fields, in order |
//! |---|---|
//! | `BlockStored` | `block_hashes`, `parent_block_hash`, `token_ids`, `block_size`, `lora_id`, `medium`, `lora_name`, `extra_keys`, `group_idx`, `kv_cache_spec_kind`, `kv_cache_spec_sliding_window` |
//! | `BlockRemoved` | `block_hashes`, `medium`, `group_idx` |
//! | `AllBlocksCleared` | none |
//!
//! Unknown map keys and extra trailing array fields are ignored; trailing array fields may be
//! missing (msgspec's `omit_defaults`); unknown event types decode to [`Event::Unknown`]. A
//! block hash ([`BlockHash`]) is an integer (unsigned from vLLM and TRT-LLM, possibly negative
//! from SGLang) or a byte string (vLLM with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`).
//!
//! # For a KV index
//!
//! With the default `sched` feature, [`decode_batch`] decodes a payload straight into
//! `kthena_sched::KvEvent`s, skipping what an index keyed on token ids cannot use (LoRA blocks,
//! tiers other than `GPU`, KV-cache groups other than 0).
//!
//! ```
//! use kthena_kvevents::{BlockHash, BlockStored, Encoding, Event, EventBatch};
//!
//! // What an engine publishes: two blocks of 2 tokens.
//! let batch = EventBatch {
//!     ts: 1.5,
//!     events: vec![Event::BlockStored(BlockStored {
//!         block_hashes: vec![BlockHash::Int(11), BlockHash::Int(12)],
//!         token_ids: vec![1, 2, 3, 4],
//!         block_size: 2,
//!         medium: Some("GPU".to_owned()),
//!         ..BlockStored::default()
//!     })],
//!     data_parallel_rank: Some(0),
//! };
//! let payload = batch.encode(Encoding::VllmMap);
//! assert_eq!(EventBatch::decode(&payload)?, batch);
//!
//! // What a router feeds its KV index.
//! # #[cfg(feature = "sched")] {
//! let decoded = kthena_kvevents::decode_batch(&payload)?;
//! assert_eq!(decoded.ignored, 0);
//! assert_eq!(
//!     decoded.events,
//!     vec![kthena_sched::KvEvent::BlockStored {
//!         block_hashes: vec![11, 12],
//!         parent_block_hash: None,
//!         token_ids: vec![1, 2, 3, 4],
//!         block_size: 2,
//!     }]
//! );
//! # }
//! # Ok::<(), kthena_kvevents::Error>(())
//! ```

mod decode;
mod encode;
mod frames;
#[cfg(feature = "sched")]
mod index;
mod publisher;
#[cfg(feature = "subscribe")]
mod subscribe;
mod wire;

pub use frames::{END_SEQ, SeqStep, SeqTracker, split_frames};
#[cfg(feature = "sched")]
pub use index::{IndexBatch, decode_batch, event_type};
pub use publisher::{
    DEFAULT_ENDPOINT, ENDPOINT_ANNOTATION, KV_EVENTS_FLAG, PublisherConfig, REPLAY_ANNOTATION,
    shell_words,
};
#[cfg(feature = "subscribe")]
pub use subscribe::{FIRST_BACKOFF, MAX_BACKOFF, Subscriber, subscribe};
pub use wire::{BlockHash, BlockRemoved, BlockStored, Encoding, Event, EventBatch, ExtraKey};

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The message does not have the three frames `[topic, seq, payload]`.
    #[error("expected 3 frames (topic, seq, payload), got {0}")]
    FrameCount(usize),
    /// The sequence frame is not 8 bytes long.
    #[error("sequence frame has {0} bytes, expected 8")]
    SeqLength(usize),
    /// The payload is not valid msgpack.
    #[error("invalid msgpack")]
    Msgpack(#[from] rmpv::decode::Error),
    /// Bytes follow the batch in the payload.
    #[error("{0} trailing bytes after the batch")]
    TrailingBytes(usize),
    /// A required field is missing or has the wrong type.
    #[error("{}{field} is {found}, expected {expected}", at(*event))]
    Field {
        /// Index of the event in the batch; `None` for the batch's own fields.
        event: Option<usize>,
        /// The field's name (`events`, `block_hashes`, `type`, ...).
        field: &'static str,
        /// What the format requires (`"a list"`, `"int or bytes"`, ...).
        expected: &'static str,
        /// The msgpack type found (`"str"`, `"nil"`, ...) or `"missing"`.
        found: &'static str,
    },
    /// An engine's `--kv-events-config` cannot be read.
    #[error("invalid KV-event configuration: {reason}")]
    KvEventsConfig {
        /// What is wrong, with the value.
        reason: String,
    },
    /// A KV-event endpoint cannot be subscribed to from outside the engine's pod.
    #[error("KV-event endpoint {endpoint} {reason}")]
    KvEventsEndpoint {
        /// The endpoint as configured.
        endpoint: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
}

fn at(event: Option<usize>) -> String {
    event.map_or_else(String::new, |i| format!("event {i}: "))
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
