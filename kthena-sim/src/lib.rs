//! An LLM inference engine simulator that is vLLM (or SGLang) from the outside.
//!
//! `kthena-sim` serves vLLM's OpenAI-compatible HTTP API (`/v1/completions`,
//! `/v1/chat/completions` with SSE, `/v1/responses`, `/v1/models`, `/health`, `/tokenize`,
//! `/detokenize`, the `/render` endpoints, `/version`, `/load`, LoRA load/unload, `/metrics`
//! with vLLM's metric names) and publishes KV-cache events over ZMQ in vLLM's wire format, with
//! vLLM's own block hashes ([`BlockHasher`]). Inside, a discrete-time model of continuous batching (waiting queue,
//! `max_num_seqs`, chunked prefill, a paged KV cache with prefix caching and LRU eviction)
//! decides when each token comes out, with a default profile of a 7B model on one H100.
//!
//! It does **not** run a model: generated text is drawn from a small fixed vocabulary with a
//! seeded RNG. Use it to test routers, autoscalers and benchmarks without GPUs.
//!
//! Start with [`spawn`] (one engine on the current Tokio runtime) or [`spawn_many`] (for
//! integration tests); the `kthena-sim` binary wraps the same [`Config`].
//!
//! ```no_run
//! # async fn demo() -> kthena_sim::Result<()> {
//! use kthena_sim::{Config, spawn_many};
//! let engines = spawn_many(3, Config::default().with_time_scale(10.0)).await?;
//! let urls: Vec<String> = engines.iter().map(|e| e.base_url()).collect();
//! // ... send traffic to `urls` ...
//! for e in engines {
//!     e.kill().await;
//! }
//! # Ok(()) }
//! ```
//!
//! The cost model, its sources, the P/D roles and the KV-event format are described in
//! `docs/simulator.md`.

mod api;
mod config;
mod engine;
mod error;
mod hash;
mod kv;
mod kv_events;
mod metrics;
#[cfg(feature = "node")]
pub mod node;
mod offline;
mod server;
mod tokenize;

pub use config::{Config, Faults, Flavor, KvEventsFormat, Profile, Role};
pub use error::Error;
pub use hash::{BlockHash, BlockHasher, ExtraKey, HashAlgo, RequestKeys};
pub use kv::KvEvent;
pub use kv_events::{encode_batch, wire_event};
pub use offline::{OfflineReport, OfflineRequest, simulate};
pub use server::{SimHandle, spawn, spawn_in_memory, spawn_many};
pub use tokenize::{FALLBACK_VOCAB, Tokenizer, render_chat};

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
