//! What scheduling returns: ranked endpoints, prefill/decode pairs, match ratios and plugin
//! timings.

use crate::types::EndpointId;

/// State counters a score plugin exposes ([`Scheduler::plugin_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginStats {
    /// Entries the plugin's cache holds now (`prefix-cache`: (endpoint, block) entries).
    pub cache_entries: Option<usize>,
    /// `(model, entries evicted for capacity)` since the plugin was built; counts only grow.
    pub evictions: Vec<(String, u64)>,
}

/// Observations a score plugin reports with its scores.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct ScoreNote {
    /// For cache-affinity plugins: longest matched prefix / total blocks of the request,
    /// a ratio in `0.0..=1.0` (Go Kthena's prefix-cache match-ratio metric).
    pub match_ratio: Option<f64>,
}

impl ScoreNote {
    /// A note with a match ratio (`0.0..=1.0`).
    pub fn with_match_ratio(ratio: f64) -> Self {
        Self {
            match_ratio: Some(ratio),
        }
    }
}

/// One ranked endpoint of a [`Decision`].
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// Index into the candidate slice passed to [`Scheduler::schedule`].
    pub index: usize,
    /// The endpoint's id.
    pub id: EndpointId,
    /// Weighted total `Σ weight × score` (each score `0..=100`).
    pub score: f64,
}

/// The result of [`Scheduler::schedule`]: endpoints ranked best first, then up to
/// `top_n - 1` fallbacks to retry in order. Never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Best first; equal totals are ordered by ascending [`EndpointId`], except that the
    /// candidates tied for the best total take turns across calls, per model (the first such
    /// call for a model keeps id order, each later one for that model starts one further;
    /// requests of other models do not move its turn).
    pub ranked: Vec<Ranked>,
    /// `(plugin name, match ratio)` for each score plugin that has a notion of match and
    /// reported one, in configuration order: the longest cached prefix over the request's
    /// blocks, a ratio in `0.0..=1.0` (`prefix-cache`, `kvcache-aware`, `least-prefill`;
    /// host plugins through [`ScoreNote::with_match_ratio`]).
    pub match_ratios: Vec<(&'static str, f64)>,
    /// Time each plugin took for this decision, in configuration order (filters, then
    /// scores); Go Kthena's `kthena_router_scheduler_plugin_duration_seconds`.
    pub plugin_timings: Vec<PluginTiming>,
}

/// Whether a plugin ran as a filter or as a score plugin (Go Kthena's metric label `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginKind {
    /// A [`FilterPlugin`].
    Filter,
    /// A [`ScorePlugin`].
    Score,
}

impl PluginKind {
    /// `filter` or `score`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Filter => "filter",
            Self::Score => "score",
        }
    }
}

/// Time one plugin took for one decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PluginTiming {
    /// The plugin's config name.
    pub plugin: &'static str,
    /// Filter or score.
    pub kind: PluginKind,
    /// Wall-clock time of the plugin call, seconds.
    pub seconds: f64,
}

impl Decision {
    /// The best endpoint.
    pub fn best(&self) -> &Ranked {
        // invariant: `schedule` never returns an empty decision.
        &self.ranked[0]
    }
}

/// A prefill/decode pair of a [`PdDecision`].
#[derive(Debug, Clone, PartialEq)]
pub struct PdPair {
    /// The decode endpoint.
    pub decode: Ranked,
    /// The best prefill endpoint of the decode endpoint's group.
    pub prefill: Ranked,
}

/// The result of [`Scheduler::schedule_pd`]: pairs to try in order (best decode first).
/// Never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct PdDecision {
    /// Pairs in decode rank order; decode endpoints with no usable prefill are skipped.
    pub pairs: Vec<PdPair>,
}
