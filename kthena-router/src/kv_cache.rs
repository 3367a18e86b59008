//! KV-cache-aware routing in the router: the `kvCache:` configuration section, the KV index
//! shared by every scheduler the router builds (it survives reloads), the tokenizers, and
//! the supervisor that keeps one KV-event subscription per endpoint.
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
//!   redis: {url: "redis://127.0.0.1:6379", timeout: 500ms}
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
//! The index exists when `kvcache-aware` is an enabled score plugin. With `index: memory` it is
//! kthena-sched's [`InMemoryKvIndex`] (block size `blockSizeToHash`, cap `maxIndexEntries`),
//! fed by the endpoints' KV events; it is kept across reloads while those two arguments do not
//! change. With `index: redis` it is a [`RedisKvIndex`] and no events are subscribed to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kthena_sched::{
    EndpointId, InMemoryKvIndex, KvCacheAwareArgs, KvIndex, LeastPrefillArgs, Scheduler,
};
use serde::{Deserialize, Deserializer};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::kv_events::KvSource;
use crate::kv_redis::RedisKvIndex;
use crate::service::Shared;
use crate::tokenize::{ModelTokenizer, Tokenizers};

/// How often the supervisor compares the snapshot's endpoints with its subscriptions.
pub const SUPERVISE_INTERVAL: Duration = Duration::from_millis(200);

/// Which [`KvIndex`] backs `kvcache-aware`.
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
}

impl Default for RedisConfig {
    /// `redis://127.0.0.1:6379`, 500 ms.
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            timeout: Duration::from_millis(500),
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

fn go_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    crate::config::go_duration::deserialize(d)
}

fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// The KV-routing state of one snapshot: immutable, shared by its requests.
#[derive(Debug, Default)]
pub struct KvState {
    /// The index `kvcache-aware` and `least-prefill` read; `None` when neither is enabled.
    pub index: Option<Arc<dyn KvIndex>>,
    /// Whether the index is fed by KV events (the memory backend).
    pub feeds_events: bool,
    /// `kvcache-aware`'s arguments (defaults when it is not configured; block size and index
    /// cap from `least-prefill` when only that plugin is enabled).
    pub args: KvCacheAwareArgs,
    /// Tokenizers and the remote fallback.
    pub tokenizers: Arc<Tokenizers>,
    /// KV-event sources by endpoint name.
    pub sources: HashMap<String, (String, Option<String>)>,
}

impl KvState {
    /// Whether a request needs token ids: `kvcache-aware` or `least-prefill` is enabled, or a
    /// tokenizer is configured (real input-token counts).
    #[must_use]
    pub fn wants_tokens(&self) -> bool {
        self.index.is_some() || !self.tokenizers.is_empty()
    }

    /// Builds a scheduler from the `scheduler:` section that uses this state's index. With
    /// `previous` (a reload) it is rebuilt from that scheduler: same seed, and the plugin
    /// state of plugins in both configurations (the prefix-cache store) carried over.
    ///
    /// # Errors
    /// The scheduler's reason.
    pub fn build_scheduler(
        &self,
        cfg: &kthena_sched::Config,
        previous: Option<&Scheduler>,
    ) -> Result<Scheduler, String> {
        let cfg = cfg
            .clone()
            .validate()
            .map_err(crate::sched::scheduler_reason)?;
        let b = match previous {
            Some(p) => p.rebuild(cfg),
            None => {
                let seed = u64::try_from(
                    jiff::Timestamp::now()
                        .as_nanosecond()
                        .rem_euclid(i128::from(u64::MAX)),
                )
                .unwrap_or(0x9e37_79b9_7f4a_7c15);
                Scheduler::builder(cfg).seed(seed)
            }
        };
        let b = match &self.index {
            Some(idx) => b.kv_index(Arc::clone(idx)),
            None => b.without_kv_index(),
        };
        b.clock(crate::sched::clock)
            .build()
            .map_err(crate::sched::scheduler_reason)
    }

    /// The token ids of a request's prompt, when they are wanted: in-process with the
    /// tokenizer of `upstream_model` or `model`, else (only when `kvcache-aware` is enabled)
    /// from `remote_url`'s `/tokenize`. Observes Go's `kvcache_aware` tokenize families and,
    /// when `kvcache-aware` has no way to tokenize for the ModelServer's `engine` (no
    /// tokenizer configured, remote tokenization off), `tokenizer_unsupported_engine_total`.
    pub async fn request_tokens(
        &self,
        shared: &Shared,
        engine: &str,
        model: &str,
        upstream_model: &str,
        prompt: &crate::openai::Prompt,
        remote_url: Option<&str>,
    ) -> Option<Vec<u32>> {
        if !self.wants_tokens() {
            return None;
        }
        let remote = if self.index.is_some() {
            remote_url
        } else {
            None
        };
        let started = tokio::time::Instant::now();
        let models = [upstream_model, model];
        if self.index.is_some()
            && self.tokenizers.get(&models).is_none()
            && (remote.is_none() || !self.tokenizers.remote)
        {
            // kvcache-aware needs token ids and nothing can tokenize for this engine.
            shared.metrics.plugins.unsupported_engine(model, engine);
        }
        let ids = self
            .tokenizers
            .tokens(&shared.client, &shared.metrics.kv, &models, prompt, remote)
            .await;
        if self.index.is_some() {
            let m = &shared.metrics.plugins;
            m.tokenize(model, started.elapsed().as_secs_f64());
            if ids.is_none() {
                m.error(model, crate::plugin_metrics::KvStage::Tokenize);
            }
        }
        ids
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum IndexKey {
    Memory { block_size: usize, cap: usize },
    Redis(RedisConfig),
}

/// Keeps the index and the tokenizers across reloads; owned by the [`Loader`](crate::Loader).
#[derive(Debug, Default)]
pub struct KvLoader {
    /// Handed to the Redis index for its lookup metrics.
    pub(crate) metrics: Option<crate::plugin_metrics::PluginMetrics>,
    index: Option<(IndexKey, Arc<dyn KvIndex>)>,
    tokenizers: Option<(TokenizersKey, Arc<Tokenizers>)>,
}

/// What the loaded tokenizers depend on: the list, cache size, remote settings, base folder.
type TokenizersKey = (Vec<TokenizerConfig>, usize, bool, Duration, PathBuf);

impl KvLoader {
    /// Builds the state for `cfg`, reusing the previous index and tokenizers when their
    /// settings did not change. Nothing is remembered until [`commit`](Self::commit).
    ///
    /// # Errors
    /// A reason naming the field: invalid `kvcache-aware` args, an invalid Redis URL, a
    /// tokenizer that cannot be loaded.
    pub fn prepare(&self, cfg: &Config) -> Result<KvState, String> {
        let kc = &cfg.kv_cache;
        let score_enabled = |name: &str| {
            cfg.scheduler
                .plugins
                .score
                .enabled
                .iter()
                .any(|p| p.name == name)
        };
        let kv_aware = score_enabled("kvcache-aware");
        let least_prefill = score_enabled("least-prefill");
        let enabled = kv_aware || least_prefill;
        let args_v = cfg.scheduler.args("kvcache-aware");
        let mut args = if args_v.is_null() {
            KvCacheAwareArgs::default()
        } else {
            KvCacheAwareArgs::deserialize(args_v)
                .map_err(|e| format!("scheduler: kvcache-aware args: {e}"))?
        };
        if least_prefill && !kv_aware {
            // The index is least-prefill's alone: its block size and cap decide.
            let lp_v = cfg.scheduler.args("least-prefill");
            let lp = if lp_v.is_null() {
                LeastPrefillArgs::default()
            } else {
                LeastPrefillArgs::deserialize(lp_v)
                    .map_err(|e| format!("scheduler: least-prefill args: {e}"))?
            };
            args.block_size_to_hash = lp.block_size_to_hash;
            args.max_index_entries = lp.max_index_entries;
        }
        let index = if enabled {
            let key = match kc.index {
                IndexBackend::Memory => IndexKey::Memory {
                    block_size: args.block_size_to_hash,
                    cap: args.max_index_entries,
                },
                IndexBackend::Redis => IndexKey::Redis(kc.redis.clone()),
            };
            match &self.index {
                Some((k, idx)) if *k == key => Some(Arc::clone(idx)),
                _ => Some(match &key {
                    IndexKey::Memory { block_size, cap } => Arc::new(
                        InMemoryKvIndex::new(*block_size, *cap)
                            .map_err(|e| format!("scheduler: kvcache-aware: {e}"))?,
                    )
                        as Arc<dyn KvIndex>,
                    IndexKey::Redis(r) => {
                        let mut idx = RedisKvIndex::new(&r.url, r.timeout)
                            .map_err(|e| format!("kvCache.redis.url: {e}"))?;
                        if let Some(m) = &self.metrics {
                            idx = idx.with_metrics(m.clone());
                        }
                        Arc::new(idx) as Arc<dyn KvIndex>
                    }
                }),
            }
        } else {
            None
        };
        let tkey = (
            kc.tokenizers.clone(),
            kc.tokenize_cache_entries,
            kc.remote_tokenize,
            kc.remote_tokenize_timeout,
            cfg.base_dir.clone(),
        );
        let tokenizers = match &self.tokenizers {
            Some((k, t)) if *k == tkey => Arc::clone(t),
            _ => {
                let mut list = Vec::with_capacity(kc.tokenizers.len());
                for (i, t) in kc.tokenizers.iter().enumerate() {
                    let json = resolve(&cfg.base_dir, &t.tokenizer);
                    let tc = t
                        .tokenizer_config
                        .as_ref()
                        .map(|p| resolve(&cfg.base_dir, p));
                    let m = ModelTokenizer::load(
                        &t.model,
                        &json,
                        tc.as_deref(),
                        kc.tokenize_cache_entries,
                    )
                    .map_err(|e| format!("kvCache.tokenizers[{i}]: {e}"))?;
                    list.push(Arc::new(m));
                }
                Arc::new(Tokenizers::new(
                    list,
                    kc.remote_tokenize,
                    kc.remote_tokenize_timeout,
                ))
            }
        };
        let sources = cfg
            .endpoints()
            .iter()
            .filter_map(|e| {
                e.kv_events
                    .clone()
                    .map(|a| (e.name.clone(), (a, e.kv_events_replay.clone())))
            })
            .collect();
        Ok(KvState {
            feeds_events: index.is_some() && kc.index == IndexBackend::Memory,
            index,
            args,
            tokenizers,
            sources,
        })
    }

    /// Remembers `state`'s index and tokenizers for the next [`prepare`](Self::prepare).
    pub fn commit(&mut self, cfg: &Config, state: &KvState) {
        let kc = &cfg.kv_cache;
        self.index = state.index.as_ref().map(|idx| {
            let key = match kc.index {
                IndexBackend::Memory => IndexKey::Memory {
                    block_size: state.args.block_size_to_hash,
                    cap: state.args.max_index_entries,
                },
                IndexBackend::Redis => IndexKey::Redis(kc.redis.clone()),
            };
            (key, Arc::clone(idx))
        });
        self.tokenizers = Some((
            (
                kc.tokenizers.clone(),
                kc.tokenize_cache_entries,
                kc.remote_tokenize,
                kc.remote_tokenize_timeout,
                cfg.base_dir.clone(),
            ),
            Arc::clone(&state.tokenizers),
        ));
    }
}

struct Running {
    source: KvSource,
    index: Arc<dyn KvIndex>,
    cancel: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

/// Keeps one KV-event subscription per endpoint of the current snapshot that has a
/// `kvEvents` address (and while the index is fed by events), until `cancel` fires.
///
/// Every [`SUPERVISE_INTERVAL`] it starts subscriptions for new endpoints and stops those of
/// endpoints that left (or whose address or index changed); a stopped subscription's
/// endpoint is then removed from the index, so no entry of a removed engine survives, even
/// one applied after the scheduler's own removal hook. It also refreshes the index-size gauge.
pub async fn supervise(shared: Arc<Shared>, cancel: CancellationToken, tasks: TaskTracker) {
    let mut running: HashMap<EndpointId, Running> = HashMap::new();
    let metrics = shared.metrics.kv.clone();
    let mut tick = tokio::time::interval(SUPERVISE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        let snap = shared.snapshot.load_full();
        let mut desired: HashMap<EndpointId, (KvSource, Arc<dyn KvIndex>)> = HashMap::new();
        if let Some(index) = snap.kv.index.as_ref().filter(|_| snap.kv.feeds_events) {
            for ep in &snap.endpoints {
                if let Some((events, replay)) = snap.kv.sources.get(&ep.name) {
                    let source = KvSource {
                        endpoint: ep.id.clone(),
                        events: events.clone(),
                        replay: replay.clone(),
                    };
                    desired.insert(ep.id.clone(), (source, Arc::clone(index)));
                }
            }
        }
        let stale: Vec<EndpointId> = running
            .iter()
            .filter(|(id, r)| {
                desired
                    .get(*id)
                    .is_none_or(|(s, idx)| *s != r.source || !Arc::ptr_eq(idx, &r.index))
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some(r) = running.remove(&id) {
                r.cancel.cancel();
                let _ = r.done.await;
                r.index.remove_endpoint(&id);
                metrics.remove_endpoint(id.as_str());
                tracing::info!(endpoint = %id, "Stopped KV-event subscription and cleared its entries");
            }
        }
        for (id, (source, index)) in desired {
            if running.contains_key(&id) {
                continue;
            }
            let token = cancel.child_token();
            let done = tasks.spawn(crate::kv_events::subscribe(
                source.clone(),
                Arc::clone(&index),
                metrics.clone(),
                token.clone(),
            ));
            running.insert(
                id,
                Running {
                    source,
                    index,
                    cancel: token,
                    done,
                },
            );
        }
        if let Some(index) = &snap.kv.index {
            metrics.set_index_entries(index.len());
        }
    }
    for (_, r) in running {
        r.cancel.cancel();
        let _ = r.done.await;
    }
}
