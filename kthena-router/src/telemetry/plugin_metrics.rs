//! Go Kthena's scheduler-plugin families (`pkg/kthena-router/metrics/metrics.go`),
//! registered into the router's registry by [`Metrics`](crate::Metrics), with Go's
//! names, types, labels and buckets:
//!
//! | family | type | labels | buckets (s) / meaning |
//! |---|---|---|---|
//! | `kthena_router_scheduler_plugin_duration_seconds` | histogram | `model`, `plugin`, `type` | .001 .005 .01 .05 .1 .5; `type` = `filter` or `score` |
//! | `kthena_router_prefix_cache_evictions_total` | counter | `model` | prefix-cache entries dropped because an endpoint's LRU was full |
//! | `kthena_router_prefix_cache_entries` | gauge | | (endpoint, block) entries of the prefix-cache store |
//! | `kthena_router_kvcache_aware_redis_duration_seconds` | histogram | `model` | .0005 .001 .0025 .005 .01 .025 .05 .1 .25 .5 1 2.5; one Redis block lookup |
//! | `kthena_router_kvcache_aware_tokenize_duration_seconds` | histogram | `model` | same buckets; prompt tokenization for kvcache-aware |
//! | `kthena_router_kvcache_aware_errors_total` | counter | `model`, `stage` | `stage` = `tokenize` or `redis` |
//! | `kthena_router_tokenizer_unsupported_engine_total` | counter | `model`, `engine` | a kvcache-aware request that nothing can tokenize for the ModelServer's `inferenceEngine` (no tokenizer configured for the model, remote tokenization off) |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kthena_sched::{PluginTiming, Scheduler};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Plugin duration buckets in seconds (Go's `metrics.go`).
pub(crate) const PLUGIN_BUCKETS: [f64; 6] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5];
/// kvcache-aware Redis and tokenize duration buckets in seconds (Go's `metrics.go`).
pub(crate) const KVCACHE_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Recorded once per plugin on every scheduled request, so hashed as one folded `u64`
/// (`label_hash::folded_hash`).
#[derive(Debug, Clone, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    model: Arc<str>,
    plugin: &'static str,
    r#type: &'static str,
}

crate::telemetry::label_hash::folded_hash!(PluginLabels: model, plugin, r#type);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabels {
    model: String,
    stage: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EngineLabels {
    model: String,
    engine: String,
}

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn plugin_hist() -> Histogram {
    Histogram::new(PLUGIN_BUCKETS)
}

fn kvcache_hist() -> Histogram {
    Histogram::new(KVCACHE_BUCKETS)
}

/// Where a kvcache-aware request failed (label `stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvStage {
    /// The prompt could not be tokenized.
    Tokenize,
    /// The Redis lookup failed.
    Redis,
}

/// The plugin families (see the module docs). Cheap to clone: every family is a shared
/// handle.
#[derive(Debug, Clone)]
pub struct PluginMetrics {
    durations: HistFamily<PluginLabels>,
    evictions: Family<ModelLabel, Counter>,
    entries: Gauge,
    redis: HistFamily<ModelLabel>,
    tokenize: HistFamily<ModelLabel>,
    errors: Family<StageLabels, Counter>,
    unsupported: Family<EngineLabels, Counter>,
    /// Eviction counts already added, per model, and the scheduler they came from (a new
    /// scheduler starts counting from zero).
    seen: Arc<Mutex<(usize, HashMap<String, u64>)>>,
}

impl PluginMetrics {
    /// Creates the families and registers them into `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            durations: Family::new_with_constructor(plugin_hist),
            evictions: Family::default(),
            entries: Gauge::default(),
            redis: Family::new_with_constructor(kvcache_hist),
            tokenize: Family::new_with_constructor(kvcache_hist),
            errors: Family::default(),
            unsupported: Family::default(),
            seen: Arc::default(),
        };
        registry.register(
            "kthena_router_scheduler_plugin_duration_seconds",
            "Time taken by each scheduler plugin, by model, plugin and type (filter, score)",
            m.durations.clone(),
        );
        registry.register(
            "kthena_router_prefix_cache_evictions",
            "Prefix-cache entries evicted because an endpoint's LRU was full",
            m.evictions.clone(),
        );
        registry.register(
            "kthena_router_prefix_cache_entries",
            "Entries held by the prefix-cache store (sum over endpoints)",
            m.entries.clone(),
        );
        registry.register(
            "kthena_router_kvcache_aware_redis_duration_seconds",
            "Time of the kvcache-aware Redis block lookup",
            m.redis.clone(),
        );
        registry.register(
            "kthena_router_kvcache_aware_tokenize_duration_seconds",
            "Time of the kvcache-aware prompt tokenization",
            m.tokenize.clone(),
        );
        registry.register(
            "kthena_router_kvcache_aware_errors",
            "kvcache-aware failures by stage (tokenize, redis)",
            m.errors.clone(),
        );
        registry.register(
            "kthena_router_tokenizer_unsupported_engine",
            "kvcache-aware requests whose engine offers no tokenizer",
            m.unsupported.clone(),
        );
        m
    }

    /// Observes the plugin durations of one decision for `model`.
    pub fn plugin_timings(&self, model: &Arc<str>, timings: &[PluginTiming]) {
        for t in timings {
            self.durations
                .get_or_create(&PluginLabels {
                    model: Arc::clone(model),
                    plugin: t.plugin,
                    r#type: t.kind.as_str(),
                })
                .observe(t.seconds);
        }
    }

    /// Observes one Redis lookup of `secs` seconds for `model`.
    pub fn redis(&self, model: &str, secs: f64) {
        self.redis
            .get_or_create(&ModelLabel {
                model: model.to_owned(),
            })
            .observe(secs);
    }

    /// Observes one kvcache-aware tokenization of `secs` seconds for `model`.
    pub fn tokenize(&self, model: &str, secs: f64) {
        self.tokenize
            .get_or_create(&ModelLabel {
                model: model.to_owned(),
            })
            .observe(secs);
    }

    /// Counts one kvcache-aware failure.
    pub fn error(&self, model: &str, stage: KvStage) {
        let stage = match stage {
            KvStage::Tokenize => "tokenize",
            KvStage::Redis => "redis",
        };
        self.errors
            .get_or_create(&StageLabels {
                model: model.to_owned(),
                stage: stage.to_owned(),
            })
            .inc();
    }

    /// Counts one kvcache-aware request that nothing can tokenize for `engine`.
    pub fn unsupported_engine(&self, model: &str, engine: &str) {
        self.unsupported
            .get_or_create(&EngineLabels {
                model: model.to_owned(),
                engine: engine.to_owned(),
            })
            .inc();
    }

    /// Reads the prefix-cache store of `scheduler` into the entries gauge and the evictions
    /// counter (called before every exposition).
    pub fn sync(&self, scheduler: &Arc<Scheduler>) {
        let mut entries = 0usize;
        let mut evictions: Vec<(String, u64)> = Vec::new();
        for (name, stats) in scheduler.plugin_stats() {
            if name == "prefix-cache" {
                entries += stats.cache_entries.unwrap_or(0);
                evictions.extend(stats.evictions);
            }
        }
        self.entries.set(i64::try_from(entries).unwrap_or(i64::MAX));
        let id = Arc::as_ptr(scheduler) as usize;
        let mut g = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if g.0 != id {
            *g = (id, HashMap::new());
        }
        for (model, n) in evictions {
            let prev = g.1.insert(model.clone(), n).unwrap_or(0);
            if n > prev {
                self.evictions
                    .get_or_create(&ModelLabel { model })
                    .inc_by(n - prev);
            }
        }
    }
}
