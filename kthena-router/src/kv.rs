//! KV-cache-aware routing: everything the router does for the `kvcache-aware` score plugin.
//!
//! | module | what it holds |
//! |---|---|
//! | [`cache`] | the KV index shared by every scheduler the router builds (kept across reloads) and the tokenizers |
//! | [`config`] | the `kvCache:` configuration section (index backend, Redis, tokenizers) |
//! | [`events`] | the per-endpoint KV-event subscription: sequence numbers, replay, applying batches to the index |
//! | [`metrics`] | the `kthena_router_kv_*`, `kthena_router_redis_gc_*` and tokenization metrics |
//! | [`owners`] | the owners' container starts and, in cluster mode, the pod list |
//! | [`redis`] | the Redis index in Go Kthena's sidecar layout |
//! | [`redis_gc`] | the garbage collection of Redis fields (KV blocks, in-flight counts) |
//! | [`status`] | each KV-event subscription's state, for the debug dump |
//! | [`supervise`] | the supervisor that starts and stops one subscription per publishing endpoint |

pub(crate) mod cache;
pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod metrics;
pub(crate) mod owners;
pub(crate) mod redis;
pub(crate) mod redis_gc;
pub(crate) mod status;
pub(crate) mod supervise;

pub use cache::{KvLoader, KvState};
pub use config::{IndexBackend, KvCacheConfig, RedisConfig, TokenizerConfig};
pub use events::{Ingest, KvSource, REPLAY_TIMEOUT, replay, subscribe};
pub use metrics::{KvMetrics, TOKENIZE_BUCKETS};
pub use owners::{OwnerView, PodList, Starts, block_owner, in_flight_owner, pod_container_started};
pub use redis::{
    KEY_PREFIX, RedisKvIndex, block_key, fresh_owners, kthena_block_hash, owner_of,
    written_before_start,
};
pub use redis_gc::{
    DELETE_IF_UNCHANGED, FIELD_FRESH_SECS, GcReport, GcRules, GcVerdict, MAPPING_PREFIXES, RedisGc,
    RedisGcSettings, SCAN_BATCH, mapping_owner,
};
pub use status::SubscriptionStatus;
