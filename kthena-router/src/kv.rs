//! KV-cache-aware routing: everything the router does for the `kvcache-aware` score plugin.
//!
//! | module | what it holds |
//! |---|---|
//! | [`cache`] | the KV index shared by every scheduler the router builds (kept across reloads) and the tokenizers |
//! | [`config`] | the `kvCache:` configuration section (index backend, Redis, tokenizers) |
//! | [`events`] | the per-endpoint KV-event subscription: sequence numbers, replay, applying batches to the index |
//! | [`metrics`] | the `kthena_router_kv_*` and tokenization metrics |
//! | [`redis`] | the Redis index in Go Kthena's sidecar layout |
//! | [`status`] | each KV-event subscription's state, for the debug dump |
//! | [`supervise`] | the supervisor that starts and stops one subscription per publishing endpoint |

pub(crate) mod cache;
pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod metrics;
pub(crate) mod redis;
pub(crate) mod status;
pub(crate) mod supervise;

pub use cache::{KvLoader, KvState};
pub use config::{IndexBackend, KvCacheConfig, RedisConfig, TokenizerConfig};
pub use events::{Ingest, KvSource, REPLAY_TIMEOUT, replay, subscribe};
pub use metrics::{KvMetrics, TOKENIZE_BUCKETS};
pub use redis::{KEY_PREFIX, RedisKvIndex, block_key, kthena_block_hash, owner_of};
pub use status::SubscriptionStatus;
