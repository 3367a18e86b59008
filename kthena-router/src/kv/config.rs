//! The `kvCache:` configuration section of KV-cache-aware routing (index backend, Redis
//! settings, tokenizers; see `docs/kv-cache-routing.md`):
//!
//! ```yaml
//! scheduler:
//!   plugins:
//!     Score:
//!       enabled:
//!       - {name: kvcache-aware, weight: 2}
//!       - {name: least-request, weight: 1}
//! kvCache:
//!   index: memory                 # or redis (Go Kthena's sidecar layout)
//!   redis: {url: "redis://127.0.0.1:6379", timeout: 500ms, gcInterval: 1m, gcScanKeys: 10000, gcGrace: 30s}
//!   tokenizers:
//!   - model: Qwen/Qwen3-8B        # the ModelServer's spec.model or the request's model
//!     tokenizer: qwen3/tokenizer.json
//!     tokenizerConfig: qwen3/tokenizer_config.json
//!   tokenizeCacheEntries: 256
//!   remoteTokenize: true          # ask the engine's /tokenize when no tokenizer is configured
//!   remoteTokenizeTimeout: 5s
//! standalone:
//!   endpoints:
//!   - name: vllm-0
//!     address: 10.0.0.1:8000
//!     kvEvents: tcp://10.0.0.1:5557
//!     kvEventsReplay: tcp://10.0.0.1:5558
//! ```
//!
//! The index exists when `kvcache-aware` is an enabled score plugin; `index: redis` reads
//! Go Kthena's Redis layout instead of subscribing to KV events.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Which [`KvIndex`](kthena_sched::KvIndex) backs `kvcache-aware`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IndexBackend {
    /// In-process, fed by the engines' KV events (default).
    #[default]
    Memory,
    /// Go Kthena's Redis layout, written by its runtime sidecar.
    Redis,
}

/// Connection settings of the Redis index.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://host:port[/db]` (default `redis://127.0.0.1:6379`).
    pub url: String,
    /// Connect, read and write timeout (default `500ms`).
    #[serde(deserialize_with = "go_duration")]
    pub timeout: Duration,
    /// Time between two rounds of the Redis garbage collection (`kv::redis_gc`; default
    /// `1m`, Go Kthena's is 1 h; `0s` turns it off). It runs when `index: redis` is used or
    /// in-flight counts are shared through Redis (`REDIS_HOST`). The `gc*` keys are read at
    /// start (a reload does not change them).
    #[serde(deserialize_with = "go_duration")]
    pub gc_interval: Duration,
    /// Most block keys one round examines (the sum of its `SCAN ... COUNT` arguments;
    /// default 10000, Go Kthena's is 100 per hour). A full pass over `K` keys takes
    /// `ceil(K / gcScanKeys)` rounds.
    pub gc_scan_keys: usize,
    /// Cluster mode: how long a pod must have been missing from the router's pod list
    /// before its Redis fields are deleted (default `30s`): a pod the watch has not
    /// delivered yet keeps its fields.
    #[serde(deserialize_with = "go_duration")]
    pub gc_grace: Duration,
}

impl Default for RedisConfig {
    /// `redis://127.0.0.1:6379`, 500 ms; GC every minute over at most 10000 keys, 30 s grace.
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            timeout: Duration::from_millis(500),
            gc_interval: Duration::from_secs(60),
            gc_scan_keys: 10_000,
            gc_grace: Duration::from_secs(30),
        }
    }
}

/// One model's tokenizer files.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenizerConfig {
    /// The model name: matched against the ModelServer's `spec.model` first, then the
    /// request's `model`.
    pub model: String,
    /// Path of the Hugging Face `tokenizer.json` (relative to the config file's folder).
    pub tokenizer: PathBuf,
    /// Path of `tokenizer_config.json`, for the chat template and BOS/EOS strings.
    #[serde(default)]
    pub tokenizer_config: Option<PathBuf>,
}

/// The `kvCache:` section (see the module docs).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct KvCacheConfig {
    /// Index backend (default `memory`).
    pub index: IndexBackend,
    /// Redis settings for `index: redis`.
    pub redis: RedisConfig,
    /// In-process tokenizers by model.
    pub tokenizers: Vec<TokenizerConfig>,
    /// Prompt-prefix tokenization cache entries per model (default 256; 0 disables it).
    pub tokenize_cache_entries: usize,
    /// Ask the engine's `/tokenize` when no tokenizer is configured and `kvcache-aware` is
    /// enabled (default true).
    pub remote_tokenize: bool,
    /// Timeout of one remote `/tokenize` call (default `5s`, as Go Kthena).
    #[serde(deserialize_with = "go_duration")]
    pub remote_tokenize_timeout: Duration,
}

impl Default for KvCacheConfig {
    /// Memory index, no tokenizers, 256 cache entries, remote tokenization on with 5 s.
    fn default() -> Self {
        Self {
            index: IndexBackend::Memory,
            redis: RedisConfig::default(),
            tokenizers: Vec::new(),
            tokenize_cache_entries: 256,
            remote_tokenize: true,
            remote_tokenize_timeout: Duration::from_secs(5),
        }
    }
}

/// The shortest `gcInterval` other than `0s` (off): a garbage-collection round walks Redis,
/// and a shorter interval turns it into a busy loop against it.
pub(crate) const MIN_GC_INTERVAL: Duration = Duration::from_millis(100);

impl KvCacheConfig {
    /// Checks the values serde cannot: a zero Redis or remote-tokenize timeout (every call
    /// would fail), a `gcInterval` between 0 and [`MIN_GC_INTERVAL`], a `gcScanKeys` of 0.
    ///
    /// # Errors
    /// The offending key and what it must be, as `kvCache.redis.timeout: must be greater
    /// than 0`.
    pub fn validate(&self) -> Result<(), String> {
        let r = &self.redis;
        if r.timeout.is_zero() {
            return Err("kvCache.redis.timeout: must be greater than 0".into());
        }
        if !r.gc_interval.is_zero() && r.gc_interval < MIN_GC_INTERVAL {
            return Err(format!(
                "kvCache.redis.gcInterval: must be 0s (off) or at least {MIN_GC_INTERVAL:?}"
            ));
        }
        if r.gc_scan_keys == 0 {
            return Err("kvCache.redis.gcScanKeys: must be at least 1".into());
        }
        if self.remote_tokenize_timeout.is_zero() {
            return Err("kvCache.remoteTokenizeTimeout: must be greater than 0".into());
        }
        Ok(())
    }
}

fn go_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    crate::config::duration::go_duration::deserialize(d)
}
