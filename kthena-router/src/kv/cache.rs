//! KV-cache-aware routing in the router: the KV index shared by every scheduler the router
//! builds (it survives reloads), and the tokenizers; the `kvCache:` configuration section is
//! in `kv::config`, the supervisor of the KV-event subscriptions in `kv::supervise`.
//!
//! The index exists when `kvcache-aware` is an enabled score plugin. With `index: memory` it is
//! kthena-sched's [`InMemoryKvIndex`] (block size `blockSizeToHash`, cap `maxIndexEntries`),
//! fed by the endpoints' KV events; it is kept across reloads while those two arguments do not
//! change. With `index: redis` it is a [`RedisKvIndex`] and no events are subscribed to.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kthena_sched::{InMemoryKvIndex, KvCacheAwareArgs, KvIndex, LeastPrefillArgs, Scheduler};
use serde::Deserialize;

use crate::config::Config;
use crate::error::Error;
use crate::kv::config::{IndexBackend, KvCacheConfig, RedisConfig, TokenizerConfig};
use crate::kv::redis::RedisKvIndex;
use crate::scrape::HttpClient;
use crate::telemetry::metrics::Metrics;
use crate::tokenize::{ModelTokenizer, Tokenizers};

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
    /// The owners' container starts and the pod list the Redis index and the Redis garbage
    /// collection read (one per [`KvLoader`], shared by all its states).
    pub owners: Arc<crate::kv::owners::OwnerView>,
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
    /// state of plugins in both configurations (the prefix-cache store) carried over;
    /// otherwise it is seeded with `seed` (from the clock when `None`).
    ///
    /// # Errors
    /// [`Error::Scheduler`] with the scheduler's error.
    pub fn build_scheduler(
        &self,
        cfg: &kthena_sched::Config,
        previous: Option<&Scheduler>,
        seed: Option<u64>,
    ) -> Result<Scheduler, Error> {
        let cfg = cfg
            .clone()
            .validate()
            .map_err(crate::sched::scheduler_error)?;
        let b = match previous {
            Some(p) => p.rebuild(cfg),
            None => Scheduler::builder(cfg).seed(seed.unwrap_or_else(crate::sched::clock_seed)),
        };
        let b = match &self.index {
            Some(idx) => b.kv_index(Arc::clone(idx)),
            None => b.without_kv_index(),
        };
        b.clock(crate::sched::clock)
            .build()
            .map_err(crate::sched::scheduler_error)
    }

    /// The token ids of a request's prompt, when they are wanted: in-process with the
    /// tokenizer of `upstream_model` or `model`, else (only when `kvcache-aware` is enabled)
    /// from `remote_url`'s `/tokenize` (through `client`). Observes Go's `kvcache_aware`
    /// tokenize families in `metrics` and, when `kvcache-aware` has no way to tokenize for the
    /// ModelServer's `engine` (no tokenizer configured, remote tokenization off),
    /// `tokenizer_unsupported_engine_total`.
    pub(crate) async fn request_tokens(
        &self,
        client: &HttpClient,
        metrics: &Metrics,
        names: TokenizeFor<'_>,
        req: &Arc<kthena_openai::ParsedRequest>,
        remote_url: Option<&str>,
        inline: bool,
    ) -> Option<Vec<u32>> {
        let TokenizeFor {
            engine,
            model,
            upstream_model,
        } = names;
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
            metrics.plugins.unsupported_engine(model, engine);
        }
        let ids = self
            .tokenizers
            .tokens(client, &metrics.kv, &models, req, remote, inline)
            .await;
        if self.index.is_some() {
            let m = &metrics.plugins;
            m.tokenize(model, started.elapsed().as_secs_f64());
            if ids.is_none() {
                m.error(model, crate::telemetry::plugin_metrics::KvStage::Tokenize);
            }
        }
        ids
    }
}

/// The names a request's prompt is tokenized for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenizeFor<'a> {
    /// The ModelServer's inference engine (a metric label).
    pub(crate) engine: &'a str,
    /// The request's `model`.
    pub(crate) model: &'a str,
    /// The model name sent upstream.
    pub(crate) upstream_model: &'a str,
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
    pub(crate) metrics: Option<crate::telemetry::plugin_metrics::PluginMetrics>,
    index: Option<(IndexKey, Arc<dyn KvIndex>)>,
    tokenizers: Option<(TokenizersKey, Arc<Tokenizers>)>,
    owners: Arc<crate::kv::owners::OwnerView>,
}

/// What the loaded tokenizers depend on: the list, cache size, remote settings, base folder.
type TokenizersKey = (Vec<TokenizerConfig>, usize, bool, Duration, PathBuf);

impl KvLoader {
    /// Builds the state for `cfg`, reusing the previous index and tokenizers when their
    /// settings did not change. Nothing is remembered until [`commit`](Self::commit).
    ///
    /// # Errors
    /// [`Error::KvCacheConfig`] naming the setting: invalid `kvcache-aware` args, an
    /// invalid Redis URL, a tokenizer that cannot be loaded.
    pub fn prepare(&self, cfg: &Config) -> Result<KvState, Error> {
        let kc = &cfg.kv_cache;
        let (enabled, args) = index_args(&cfg.scheduler)?;
        let index = if enabled {
            Some(self.index_for(&index_key(kc, &args))?)
        } else {
            None
        };
        let tokenizers = self.tokenizers_for(cfg)?;
        Ok(KvState {
            feeds_events: index.is_some() && kc.index == IndexBackend::Memory,
            index,
            args,
            tokenizers,
            owners: Arc::clone(&self.owners),
        })
    }

    /// The previous index when its key is the same, else a new one.
    fn index_for(&self, key: &IndexKey) -> Result<Arc<dyn KvIndex>, Error> {
        if let Some((k, idx)) = &self.index
            && k == key
        {
            return Ok(Arc::clone(idx));
        }
        Ok(match key {
            IndexKey::Memory { block_size, cap } => Arc::new(
                InMemoryKvIndex::new(*block_size, *cap)
                    .map_err(|e| kv_config("scheduler: kvcache-aware", e))?,
            ) as Arc<dyn KvIndex>,
            IndexKey::Redis(r) => {
                let mut idx = RedisKvIndex::new(&r.url, r.timeout)
                    .map_err(|e| kv_config("kvCache.redis.url", e))?
                    .with_owners(Arc::clone(&self.owners));
                if let Some(m) = &self.metrics {
                    idx = idx.with_metrics(m.clone());
                }
                Arc::new(idx) as Arc<dyn KvIndex>
            }
        })
    }

    /// The previous tokenizers when their settings are the same, else newly loaded ones.
    fn tokenizers_for(&self, cfg: &Config) -> Result<Arc<Tokenizers>, Error> {
        let kc = &cfg.kv_cache;
        if let Some((k, t)) = &self.tokenizers
            && *k == tokenizers_key(cfg)
        {
            return Ok(Arc::clone(t));
        }
        let mut list = Vec::with_capacity(kc.tokenizers.len());
        for (i, t) in kc.tokenizers.iter().enumerate() {
            let json = resolve(&cfg.base_dir, &t.tokenizer);
            let tc = t
                .tokenizer_config
                .as_ref()
                .map(|p| resolve(&cfg.base_dir, p));
            let m = ModelTokenizer::load(&t.model, &json, tc.as_deref(), kc.tokenize_cache_entries)
                .map_err(|e| kv_config(format!("kvCache.tokenizers[{i}]"), e))?;
            list.push(Arc::new(m));
        }
        Ok(Arc::new(Tokenizers::new(
            list,
            kc.remote_tokenize,
            kc.remote_tokenize_timeout,
        )))
    }

    /// Remembers `state`'s index and tokenizers for the next [`prepare`](Self::prepare).
    pub fn commit(&mut self, cfg: &Config, state: &KvState) {
        let kc = &cfg.kv_cache;
        self.index = state
            .index
            .as_ref()
            .map(|idx| (index_key(kc, &state.args), Arc::clone(idx)));
        self.tokenizers = Some((tokenizers_key(cfg), Arc::clone(&state.tokenizers)));
    }
}

/// Whether a KV index is wanted (`kvcache-aware` or `least-prefill` is an enabled score
/// plugin), and `kvcache-aware`'s arguments: its own, with the block size and index cap of
/// `least-prefill` when only that plugin is enabled.
fn index_args(sched: &kthena_sched::Config) -> Result<(bool, KvCacheAwareArgs), Error> {
    let score_enabled = |name: &str| sched.plugins.score.enabled.iter().any(|p| p.name == name);
    let kv_aware = score_enabled("kvcache-aware");
    let least_prefill = score_enabled("least-prefill");
    let args_v = sched.args("kvcache-aware");
    let mut args = if args_v.is_null() {
        KvCacheAwareArgs::default()
    } else {
        KvCacheAwareArgs::deserialize(args_v)
            .map_err(|e| kv_config("scheduler: kvcache-aware args", e))?
    };
    if least_prefill && !kv_aware {
        // The index is least-prefill's alone: its block size and cap decide.
        let lp_v = sched.args("least-prefill");
        let lp = if lp_v.is_null() {
            LeastPrefillArgs::default()
        } else {
            LeastPrefillArgs::deserialize(lp_v)
                .map_err(|e| kv_config("scheduler: least-prefill args", e))?
        };
        args.block_size_to_hash = lp.block_size_to_hash;
        args.max_index_entries = lp.max_index_entries;
    }
    Ok((kv_aware || least_prefill, args))
}

/// What an index is kept for: its backend and, in memory, its block size and cap.
fn index_key(kc: &KvCacheConfig, args: &KvCacheAwareArgs) -> IndexKey {
    match kc.index {
        IndexBackend::Memory => IndexKey::Memory {
            block_size: args.block_size_to_hash,
            cap: args.max_index_entries,
        },
        IndexBackend::Redis => IndexKey::Redis(kc.redis.clone()),
    }
}

fn tokenizers_key(cfg: &Config) -> TokenizersKey {
    let kc = &cfg.kv_cache;
    (
        kc.tokenizers.clone(),
        kc.tokenize_cache_entries,
        kc.remote_tokenize,
        kc.remote_tokenize_timeout,
        cfg.base_dir.clone(),
    )
}

/// [`Error::KvCacheConfig`] for `field`.
fn kv_config(field: impl Into<String>, source: impl Into<crate::body::BoxError>) -> Error {
    Error::KvCacheConfig {
        field: field.into(),
        source: source.into(),
    }
}
