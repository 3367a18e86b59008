//! Kthena's request scheduler as a library: filter and score plugins over a batch of
//! candidate endpoints, a ranked decision with fallbacks, prefill/decode pairing, and the
//! prefix-cache and KV-cache indexes behind cache-aware routing.
//!
//! This crate is **not** a proxy: it has no HTTP, Kubernetes or async-runtime dependency and
//! never does I/O. A host (the Kthena router, or any other proxy) fills plain [`Candidate`]
//! snapshots and a borrowed [`Request`], calls [`Scheduler::schedule`], sends the request to
//! the ranked endpoints in order, and reports back through [`Scheduler::on_scheduled`],
//! [`Scheduler::on_completed`] and [`Scheduler::on_endpoint_removed`].
//!
//! # The embedding contract
//!
//! Everything a host needs is public (kthena-router uses nothing else):
//!
//! * **Owned completion data**: [`Scheduler::on_scheduled`] returns a [`Completion`] that
//!   borrows nothing of the request, so the host drops the prompt once it is sent and hands
//!   the `Completion` back to [`Scheduler::on_completed`] when the stream ends.
//! * **Load counters**: one [`LoadTracker`] per endpoint implements the add-at-send /
//!   subtract-at-first-byte / settle-at-end protocol of [`Metrics::in_flight`],
//!   [`Metrics::awaiting_first_token`] and [`Metrics::pending_prefill_tokens`] with an RAII
//!   [`LoadGuard`].
//! * **Reconfiguration**: [`Scheduler::reconfigure`] builds the scheduler of a new config
//!   and carries over the state of plugins present in both (the prefix-cache store, the KV
//!   index); host plugins keep theirs through [`BuildContext::state`].
//! * **Ties** take turns per model ([`Decision::ranked`]).
//! * **Remote KV indexes** never block scheduling: [`Scheduler::prepare`] returns the
//!   lookups ([`Prefetch`]) the host answers on its own runtime before
//!   [`schedule`](Scheduler::schedule) ([`Request::with_prefetch`]).
//! * **Match ratios** of every plugin with a notion of match are in
//!   [`Decision::match_ratios`].
//!
//! Start with [`Config`] (the `scheduler:` section of Kthena's router configuration) and
//! [`Scheduler::from_config`]:
//!
//! ```
//! use kthena_sched::{Candidate, Config, Metrics, Request, Scheduler};
//!
//! let config = Config::from_yaml(r#"
//! pluginConfig:
//! - name: least-request
//!   args: {maxWaitingRequests: 10}
//! plugins:
//!   Filter:
//!     enabled: [least-request]
//!   Score:
//!     enabled:
//!     - {name: least-request, weight: 1}
//!     - {name: prefix-cache, weight: 1}
//! "#)?;
//! let scheduler = Scheduler::from_config(&config)?;
//! let endpoints = vec![
//!     Candidate::new("10.0.0.1:8000", "qwen3").with_metrics(Metrics { in_flight: 3, ..Metrics::default() }),
//!     Candidate::new("10.0.0.2:8000", "qwen3"),
//! ];
//! let request = Request::new("qwen3").with_prompt("You are a helpful assistant.");
//! let decision = scheduler.schedule(&request, &endpoints)?;
//! assert_eq!(decision.best().id.as_str(), "10.0.0.2:8000");
//! assert_eq!(decision.ranked.len(), 2); // best, then the fallback
//!
//! // Sending: the owned completion data and the endpoint's load counters.
//! let load = std::sync::Arc::new(kthena_sched::LoadTracker::new());
//! let done = scheduler.on_scheduled(&request, &endpoints[decision.best().index]);
//! assert_eq!(done.prefill_tokens, 7); // ceil(28 prompt bytes / 4), no KV index
//! let mut guard = load.begin(done.prefill_tokens);
//! guard.first_byte(); // the first token arrived
//! drop(guard); // the stream ended
//! scheduler.on_completed(&done, true);
//! assert_eq!(load.in_flight(), 0);
//! # Ok::<(), kthena_sched::Error>(())
//! ```
//!
//! # Plugins
//!
//! Go Kthena's plugins are in `pkg/kthena-router/scheduler/plugins/` (file named in brackets).
//!
//! | name | kind | what it does (Go source) |
//! |---|---|---|
//! | `least-request` | filter, score | drops endpoints with `waiting >= maxWaitingRequests`; prefers fewer in-flight requests (`least_request.go`) |
//! | `least-latency` | score | prefers lower TTFT/TPOT; no data scores 50 (`least_latency.go`) |
//! | `gpu-usage` | score | prefers lower KV-cache usage (`gpu.go`) |
//! | `random` | score | uniform 0..=100 from the seeded RNG (`random.go`) |
//! | `lora-affinity` | filter | a LoRA request keeps the endpoints with the adapter loaded; base requests unfiltered |
//! | `lora-affinity-by-name` | filter | Go's lora-affinity: keeps endpoints whose model list has the requested name (`lora_affinity.go`) |
//! | `prefix-cache` | score | prompt-byte block hashes in per-endpoint LRUs (`prefix_cache.go`) |
//! | `kvcache-aware` | score | token-block hashes in a [`KvIndex`] fed by KV events (`kvcache_aware.go`) |
//! | `least-prefill` | score | fewest prompt tokens to prefill before this request's first token |
//! | `load-imbalance` | filter | SMG's imbalance guard: when loads are imbalanced keep only the least-loaded |
//!
//! The user guide `docs/scheduler.md` gives every formula and argument.

mod bounded;
mod builder;
mod config;
mod decision;
mod framework;
mod hash;
mod kv_index;
mod plugin;
mod plugins;
mod prefetch;
mod registry;
mod request;
mod strict;
mod tracker;
mod types;

pub use builder::SchedulerBuilder;
pub use config::{Config, FilterPlugins, PluginConfig, Plugins, ScorePlugins, WeightedPlugin};
pub use decision::{
    Decision, PdDecision, PdPair, PluginKind, PluginStats, PluginTiming, Ranked, ScoreNote,
};
pub use framework::{Clock, DEFAULT_TOP_N, Scheduler};
pub use hash::{TOKEN_CHAIN_ROOT, prefix_block_hashes, token_block_hash, token_block_hashes};
pub use kv_index::{InMemoryKvIndex, KvEvent, KvIndex, KvQuery};
pub use plugin::{FilterPlugin, ScorePlugin};
pub use plugins::{
    GpuUsage, KvCacheAware, KvCacheAwareArgs, LeastLatency, LeastLatencyArgs, LeastPrefill,
    LeastPrefillArgs, LeastRequest, LeastRequestArgs, LoadImbalance, LoadImbalanceArgs,
    LoraAffinity, LoraAffinityByName, PrefixCache, PrefixCacheArgs, PrefixStore, Random,
};
pub use prefetch::{KvLookup, Prefetch};
pub use registry::{BuildContext, FilterFactory, Registry, ScoreFactory};
pub use request::{Completion, Request};
pub use strict::from_value;
pub use tracker::{LoadGuard, LoadTracker};
pub use types::{Candidate, EndpointId, Metrics, PdMember, PdRole};

/// Errors of this crate. Configuration errors happen at load time; per-request errors are
/// the three "nothing to schedule" cases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration text is not valid YAML (or has a key twice in one mapping), or its
    /// top level cannot hold the expected mapping. Shown as `invalid YAML: <reason> at line L
    /// column C`.
    #[error("invalid YAML: {}", yaml_reason(.0))]
    Yaml(#[source] Box<serde_saphyr::Error>),
    /// A key the format does not have, for example a misspelled one. Shown as
    /// ``unknown key `plugins.Score.enabled[0].wieght`: did you mean `weight`?`` (or the list
    /// of known keys when none is close).
    #[error("unknown key `{path}`: {}", strict::hint(.suggestion.as_deref(), .expected))]
    UnknownKey {
        /// Where, from the top of the parsed text, ending with the key.
        path: String,
        /// The closest known key, when one is close.
        suggestion: Option<String>,
        /// Every key accepted at that place.
        expected: Vec<&'static str>,
    },
    /// A string that is none of the accepted values (``unknown value `jsn` at
    /// `accessLog.format`: did you mean `json`?``).
    #[error("unknown value `{value}` at `{path}`: {}", strict::hint(.suggestion.as_deref(), .expected))]
    UnknownValue {
        /// Where, from the top of the parsed text.
        path: String,
        /// The value given.
        value: String,
        /// The closest accepted value, when one is close.
        suggestion: Option<String>,
        /// Every accepted value.
        expected: Vec<&'static str>,
    },
    /// A value of the wrong type or out of range (`` `plugins.Score.enabled[0].weight`:
    /// invalid type: string "2", expected a number``).
    #[error("`{path}`: {reason}")]
    Field {
        /// Where, from the top of the parsed text: `plugins.Score.enabled[0].weight`.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// [`Config::from_yaml`] was given a whole router file (a top-level `scheduler` key).
    #[error(
        "expected the scheduler section alone, but the text has a top-level `scheduler` key: \
         pass the value under `scheduler:`, or read the whole router file with \
         Config::from_router_yaml"
    )]
    RouterFile,
    /// The scheduler section is a scalar or a sequence instead of a mapping.
    #[error(
        "the scheduler section must be a mapping (keys `pluginConfig`, `plugins`), found {found}"
    )]
    NotAMapping {
        /// What was found: `an integer`, `a sequence`, ...
        found: &'static str,
    },
    /// No score plugin is enabled (every request would fail).
    #[error("the scheduler configuration enables no score plugin")]
    NoPlugins,
    /// A plugin name the registry does not know.
    #[error("unknown scheduler plugin {name:?} in {list}")]
    UnknownPlugin {
        /// Where the name appeared (`plugins.Filter.enabled`, `plugins.Score.enabled`,
        /// `pluginConfig`).
        list: &'static str,
        /// The name.
        name: String,
    },
    /// A known plugin listed where it cannot act (a score-only plugin among the filters, or
    /// the reverse).
    #[error("scheduler plugin {name:?} in {list} is a {kind} plugin only")]
    WrongPluginKind {
        /// Where the name appeared (`plugins.Filter.enabled` or `plugins.Score.enabled`).
        list: &'static str,
        /// The name.
        name: String,
        /// What it is: `score` or `filter`.
        kind: &'static str,
    },
    /// A name listed twice.
    #[error("scheduler plugin {name:?} is listed twice in {list}")]
    Duplicate {
        /// The list.
        list: &'static str,
        /// The name.
        name: String,
    },
    /// A plugin rejected its `args`.
    #[error("invalid args for scheduler plugin {plugin:?}: {reason}")]
    InvalidArgs {
        /// The plugin name.
        plugin: String,
        /// What is wrong.
        reason: String,
    },
    /// A score weight outside `0..=`[`WeightedPlugin::MAX_WEIGHT`] (or NaN).
    #[error(
        "invalid weight {weight} for score plugin {plugin:?}: must be a number in [0, 1000000]"
    )]
    InvalidWeight {
        /// The plugin name.
        plugin: String,
        /// The weight.
        weight: f64,
    },
    /// `random` is configured together with other score plugins.
    #[error("score plugin \"random\" cannot be combined with other score plugins ({others:?})")]
    RandomMixed {
        /// The other score plugins.
        others: Vec<String>,
    },
    /// [`Scheduler::schedule`] was given no candidate.
    #[error("no candidate endpoints")]
    NoCandidates,
    /// A filter rejected every remaining candidate (Go Kthena's message).
    #[error("pods have all been filtered out by {plugin:?}")]
    AllFiltered {
        /// The filter that left nothing.
        plugin: String,
    },
    /// [`Scheduler::schedule_pd`] found no decode endpoint.
    #[error("no decode pod found")]
    NoDecode,
    /// [`Scheduler::schedule_pd`] found no decode endpoint with a prefill endpoint.
    #[error("no valid prefill-decode pod pairs found")]
    NoPdPairs,
    /// A KV event that contradicts the index (unknown parent, wrong block size or token
    /// count). The index is unchanged.
    #[error("invalid KV event: {0}")]
    InvalidKvEvent(String),
}

/// A YAML error in words for users: serde-saphyr's user formatter (no hints about parser
/// options), no source snippet, `at line L column C`.
fn yaml_reason(e: &serde_saphyr::Error) -> String {
    e.render_with_options(serde_saphyr::render_options! {
        formatter: &serde_saphyr::UserMessageFormatter,
        snippets: serde_saphyr::SnippetMode::Off,
    })
}

impl Error {
    /// The field path of a [`Error::UnknownKey`], [`Error::UnknownValue`] or
    /// [`Error::Field`].
    #[must_use]
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::UnknownKey { path, .. }
            | Self::UnknownValue { path, .. }
            | Self::Field { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The same error with `prefix` put before its field path (`scheduler` turns
    /// `plugins.Score` into `scheduler.plugins.Score`); errors without a path are unchanged.
    #[must_use]
    pub fn under(mut self, prefix: &str) -> Self {
        if let Self::UnknownKey { path, .. }
        | Self::UnknownValue { path, .. }
        | Self::Field { path, .. } = &mut self
        {
            *path = strict::join(prefix, path);
        }
        self
    }
}

/// Hash map with foldhash's fast, per-map randomly seeded hasher (internal maps keyed by
/// endpoint ids and block hashes are on the per-request path).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
