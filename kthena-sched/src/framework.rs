//! Plugin traits, the plugin registry and the [`Scheduler`] itself (spec §3.1, STYLE §2.4).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A clock for plugin timings (see [`SchedulerBuilder::clock`]).
pub type Clock = fn() -> Instant;

use crate::config::Config;
use crate::kv_index::{KvIndex, KvQuery};
use crate::types::{Candidate, Completion, EndpointId, PdRole, Request};
use crate::{Error, Result};

/// Default number of ranked endpoints in a [`Decision`]: the best plus 4 fallbacks
/// (Go Kthena `topN = 5`).
pub const DEFAULT_TOP_N: usize = 5;

/// A filter plugin: removes candidates that cannot serve a request.
///
/// Called once per request, in configuration order, with the candidates and an index-aligned
/// mask `keep` (`keep.len() == cands.len()`); `keep[i]` is already `false` for candidates an
/// earlier filter removed, and a filter that compares candidates (like `load-imbalance`)
/// should only look at the kept ones. The plugin clears `keep[i]` for candidates it rejects. Setting an entry to `true` has no effect: the
/// framework ANDs the mask with the previous one, so a filter can never re-admit a candidate.
/// If a filter rejects every candidate, scheduling fails with [`Error::AllFiltered`].
pub trait FilterPlugin: Send + Sync + fmt::Debug {
    /// The plugin's config name (and metric label).
    fn name(&self) -> &'static str;

    /// Clears `keep[i]` for each candidate `cands[i]` that cannot serve `req`.
    fn filter(&self, req: &Request<'_>, cands: &[&Candidate], keep: &mut [bool]);

    /// The host removed an endpoint; forget any state about it. Default: nothing.
    fn on_endpoint_removed(&self, _id: &EndpointId) {}
}

/// A score plugin: rates each candidate for a request.
///
/// Called once per request with the candidates that passed every filter and an
/// index-aligned output slice (`out.len() == cands.len()`, zeroed on entry). Each score must
/// be finite and in `0.0..=100.0`, higher is better. The framework clamps out-of-range or
/// non-finite values (NaN becomes 0) and counts them in [`Scheduler::score_violations`].
///
/// Plugins keep state behind `&self` (interior mutability) so one scheduler serves all
/// connections; the lifecycle hooks default to doing nothing.
pub trait ScorePlugin: Send + Sync + fmt::Debug {
    /// The plugin's config name (and metric label).
    fn name(&self) -> &'static str;

    /// Writes one score per candidate into `out` and returns optional observations.
    fn score(&self, req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote;

    /// The host sent `req` to `chosen` (Go Kthena's `PostSchedule`, which runs after a
    /// successful answer; kthena-router calls it when it sends the request, so that affinity
    /// covers the prefill): cache-affinity plugins record what `chosen` now holds. Default:
    /// nothing.
    fn on_scheduled(&self, _req: &Request<'_>, _chosen: &Candidate) {}

    /// A scheduled request finished. Default: nothing.
    fn on_completed(&self, _done: &Completion<'_>) {}

    /// The host removed an endpoint; forget any state about it. Default: nothing.
    fn on_endpoint_removed(&self, _id: &EndpointId) {}

    /// Counters of the plugin's state, for the host's metrics. Default: none.
    fn stats(&self) -> PluginStats {
        PluginStats::default()
    }
}

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
    /// candidates tied for the best total take turns across calls (the first such call keeps
    /// id order, each later one starts one further).
    pub ranked: Vec<Ranked>,
    /// `(plugin name, match ratio)` for each plugin that reported one.
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

/// Everything a plugin factory may use besides its `args`.
#[derive(Debug)]
pub struct BuildContext {
    seed: u64,
    kv_index: OnceLock<Arc<dyn KvIndex>>,
}

impl BuildContext {
    /// Seed for any plugin randomness (`random`); plugins derive their RNG from it.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The shared KV-cache index: the one the host injected with
    /// [`SchedulerBuilder::kv_index`], else the one `make` creates (once).
    pub fn kv_index_or_init(&self, make: impl FnOnce() -> Arc<dyn KvIndex>) -> Arc<dyn KvIndex> {
        Arc::clone(self.kv_index.get_or_init(make))
    }
}

/// Builds a filter plugin from its `args` (`null` when absent).
pub type FilterFactory =
    Arc<dyn Fn(&serde_json::Value, &BuildContext) -> Result<Box<dyn FilterPlugin>> + Send + Sync>;
/// Builds a score plugin from its `args` (`null` when absent).
pub type ScoreFactory =
    Arc<dyn Fn(&serde_json::Value, &BuildContext) -> Result<Box<dyn ScorePlugin>> + Send + Sync>;

/// Maps plugin names to factories. [`Registry::builtin`] holds every Kthena plugin plus
/// `load-imbalance`; hosts add their own with [`Registry::register_filter`] and
/// [`Registry::register_score`].
#[derive(Clone, Default)]
pub struct Registry {
    filters: HashMap<String, FilterFactory>,
    scores: HashMap<String, ScoreFactory>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut fl: Vec<_> = self.filters.keys().collect();
        let mut sc: Vec<_> = self.scores.keys().collect();
        fl.sort();
        sc.sort();
        f.debug_struct("Registry")
            .field("filters", &fl)
            .field("scores", &sc)
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in plugins: filters `least-request`, `lora-affinity`, `lora-affinity-by-name`,
    /// `load-imbalance`;
    /// scores `least-request`, `least-latency`, `gpu-usage`, `random`, `prefix-cache`,
    /// `kvcache-aware`.
    pub fn builtin() -> Self {
        let mut r = Self::empty();
        crate::plugins::register_builtin(&mut r);
        r
    }

    /// Adds (or replaces) a filter plugin factory under `name`.
    pub fn register_filter<F>(&mut self, name: impl Into<String>, factory: F)
    where
        F: Fn(&serde_json::Value, &BuildContext) -> Result<Box<dyn FilterPlugin>>
            + Send
            + Sync
            + 'static,
    {
        self.filters.insert(name.into(), Arc::new(factory));
    }

    /// Adds (or replaces) a score plugin factory under `name`.
    pub fn register_score<F>(&mut self, name: impl Into<String>, factory: F)
    where
        F: Fn(&serde_json::Value, &BuildContext) -> Result<Box<dyn ScorePlugin>>
            + Send
            + Sync
            + 'static,
    {
        self.scores.insert(name.into(), Arc::new(factory));
    }

    fn knows(&self, name: &str) -> bool {
        self.filters.contains_key(name) || self.scores.contains_key(name)
    }
}

/// Builds a [`Scheduler`] with a custom registry, RNG seed, `top_n` or KV index.
#[derive(Debug)]
#[must_use]
pub struct SchedulerBuilder {
    config: Config,
    registry: Registry,
    seed: u64,
    top_n: usize,
    kv_index: Option<Arc<dyn KvIndex>>,
    clock: Option<Clock>,
}

impl SchedulerBuilder {
    /// Times every plugin call with `clock` and reports the durations in
    /// [`Decision::plugin_timings`]. Without a clock (the default) no timing is taken and the
    /// list stays empty.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Uses `registry` instead of [`Registry::builtin`].
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = registry;
        self
    }

    /// Seeds plugin randomness (default 0: decisions are reproducible unless a host seeds
    /// differently).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Number of ranked endpoints (best + fallbacks) per decision; default
    /// [`DEFAULT_TOP_N`]. Values below 1 are raised to 1.
    pub fn top_n(mut self, n: usize) -> Self {
        self.top_n = n.max(1);
        self
    }

    /// Uses this KV-cache index for `kvcache-aware` (for example a Redis-backed one),
    /// instead of creating an [`InMemoryKvIndex`](crate::InMemoryKvIndex).
    pub fn kv_index(mut self, index: Arc<dyn KvIndex>) -> Self {
        self.kv_index = Some(index);
        self
    }

    /// Validates the config and builds every enabled plugin.
    ///
    /// # Errors
    /// Everything [`Config::validate`] returns, plus [`Error::WrongPluginKind`] for a score
    /// plugin listed among the filters (or the reverse), [`Error::UnknownPlugin`] for a name the
    /// registry does not know (in an enabled list or in `pluginConfig`), and
    /// [`Error::InvalidArgs`] when a plugin rejects its arguments (also for plugins that have
    /// a `pluginConfig` entry but are not enabled).
    pub fn build(self) -> Result<Scheduler> {
        let config = self.config.validate()?;
        let ctx = BuildContext {
            seed: self.seed,
            kv_index: OnceLock::new(),
        };
        if let Some(idx) = self.kv_index {
            let _ = ctx.kv_index.set(idx);
        }
        for pc in &config.plugin_config {
            if !self.registry.knows(&pc.name) {
                return Err(Error::UnknownPlugin {
                    list: "pluginConfig",
                    name: pc.name.clone(),
                });
            }
            let enabled = config.plugins.filter.enabled.contains(&pc.name)
                || config
                    .plugins
                    .score
                    .enabled
                    .iter()
                    .any(|w| w.name == pc.name);
            if !enabled {
                // Check the args of configured but disabled plugins too, in a throwaway
                // context, so a typo never waits until the plugin is switched on.
                let scratch = BuildContext {
                    seed: self.seed,
                    kv_index: OnceLock::new(),
                };
                if let Some(f) = self.registry.filters.get(&pc.name) {
                    f(&pc.args, &scratch).map_err(|e| in_args(&config, &pc.name, e))?;
                }
                if let Some(f) = self.registry.scores.get(&pc.name) {
                    f(&pc.args, &scratch).map_err(|e| in_args(&config, &pc.name, e))?;
                }
            }
        }
        let mut filters = Vec::new();
        for name in &config.plugins.filter.enabled {
            let factory = self.registry.filters.get(name).ok_or_else(|| {
                let list = "plugins.Filter.enabled";
                if self.registry.scores.contains_key(name) {
                    Error::WrongPluginKind {
                        list,
                        name: name.clone(),
                        kind: "score",
                    }
                } else {
                    Error::UnknownPlugin {
                        list,
                        name: name.clone(),
                    }
                }
            })?;
            filters.push(factory(config.args(name), &ctx).map_err(|e| in_args(&config, name, e))?);
        }
        let mut scores = Vec::new();
        for wp in &config.plugins.score.enabled {
            let factory = self.registry.scores.get(&wp.name).ok_or_else(|| {
                let list = "plugins.Score.enabled";
                if self.registry.filters.contains_key(&wp.name) {
                    Error::WrongPluginKind {
                        list,
                        name: wp.name.clone(),
                        kind: "filter",
                    }
                } else {
                    Error::UnknownPlugin {
                        list,
                        name: wp.name.clone(),
                    }
                }
            })?;
            let plugin =
                factory(config.args(&wp.name), &ctx).map_err(|e| in_args(&config, &wp.name, e))?;
            scores.push((plugin, wp.weight));
        }
        Ok(Scheduler {
            filters,
            scores,
            top_n: self.top_n,
            kv_index: ctx.kv_index.into_inner(),
            clock: self.clock,
            violations: AtomicU64::new(0),
            ties: AtomicU64::new(0),
        })
    }
}

/// Puts `pluginConfig[i].args` before the path of an args error of plugin `name`.
fn in_args(config: &Config, name: &str, e: Error) -> Error {
    match config.plugin_config.iter().position(|p| p.name == name) {
        Some(i) if e.path().is_some() => e.under(&format!("pluginConfig[{i}].args")),
        _ => e,
    }
}

/// Filters, scores and ranks candidate endpoints for a request.
///
/// Build it once from a [`Config`], share it (`Arc<Scheduler>`) across connections, and call
/// [`schedule`](Self::schedule) (or [`schedule_pd`](Self::schedule_pd)) per request. Report
/// back with [`on_scheduled`](Self::on_scheduled), [`on_completed`](Self::on_completed) and
/// [`on_endpoint_removed`](Self::on_endpoint_removed) so cache-affinity plugins learn.
///
/// ```
/// use kthena_sched::{Candidate, Config, Metrics, Request, Scheduler};
/// let sched = Scheduler::from_config(&Config::default()).unwrap();
/// let cands = vec![
///     Candidate::new("a", "m").with_metrics(Metrics { kv_cache_usage: 0.9, ..Metrics::default() }),
///     Candidate::new("b", "m").with_metrics(Metrics { kv_cache_usage: 0.1, ..Metrics::default() }),
/// ];
/// let req = Request::new("m").with_prompt("hello");
/// let decision = sched.schedule(&req, &cands).unwrap();
/// assert_eq!(decision.best().id.as_str(), "b");
/// sched.on_scheduled(&req, &cands[decision.best().index]);
/// ```
#[derive(Debug)]
pub struct Scheduler {
    filters: Vec<Box<dyn FilterPlugin>>,
    scores: Vec<(Box<dyn ScorePlugin>, f64)>,
    top_n: usize,
    kv_index: Option<Arc<dyn KvIndex>>,
    clock: Option<Clock>,
    violations: AtomicU64,
    /// Rankings whose best total was shared by several candidates (rotates the tie).
    ties: AtomicU64,
}

struct Ranking {
    ranked: Vec<Ranked>,
    match_ratios: Vec<(&'static str, f64)>,
    timings: Vec<PluginTiming>,
}

// === impl Scheduler ===

impl Scheduler {
    /// Builds a scheduler with the built-in registry, seed 0 and [`DEFAULT_TOP_N`].
    ///
    /// # Errors
    /// As [`SchedulerBuilder::build`].
    pub fn from_config(config: &Config) -> Result<Self> {
        Self::builder(config.clone()).build()
    }

    /// A builder for non-default registry, seed, `top_n` or KV index.
    pub fn builder(config: Config) -> SchedulerBuilder {
        SchedulerBuilder {
            config,
            registry: Registry::builtin(),
            seed: 0,
            top_n: DEFAULT_TOP_N,
            kv_index: None,
            clock: None,
        }
    }

    /// The KV-cache index used by `kvcache-aware` and `least-prefill` (`None` when neither is
    /// enabled).
    /// Feed it the engines' KV events with [`KvIndex::apply`].
    pub fn kv_index(&self) -> Option<&Arc<dyn KvIndex>> {
        self.kv_index.as_ref()
    }

    /// The prompt tokens `cand` would still have to prefill for `req`, in tokens: the prompt's
    /// length minus the contiguous prefix the KV index says `cand` holds. Hosts add it to the
    /// endpoint's [`Metrics::pending_prefill_tokens`](crate::Metrics::pending_prefill_tokens)
    /// when they send the request, and subtract it at the first response byte. Without a KV
    /// index or token ids: `ceil(prompt bytes / 4)` (Go Kthena's input-token estimate).
    pub fn prefill_tokens(&self, req: &Request<'_>, cand: &Candidate) -> u64 {
        let Some(tokens) = req.token_ids.filter(|t| !t.is_empty()) else {
            return crate::plugins::estimated_tokens(req.prompt.len()) as u64;
        };
        let Some(index) = &self.kv_index else {
            return tokens.len() as u64;
        };
        let Some(bs) = index.block_size().filter(|b| *b > 0) else {
            return tokens.len() as u64;
        };
        let mut hashes = Vec::with_capacity(tokens.len() / bs + 1);
        crate::hash::token_block_hashes(tokens, bs, usize::MAX, &mut hashes);
        let query = KvQuery {
            model: req.model,
            token_ids: tokens,
            block_size: bs,
            block_hashes: &hashes,
        };
        let mut matched = [0u32];
        index.match_prefix(&query, &[cand], &mut matched);
        let cached = (matched[0] as usize * bs).min(tokens.len());
        (tokens.len() - cached) as u64
    }

    /// Each score plugin's name and [`PluginStats`], in configuration order.
    pub fn plugin_stats(&self) -> Vec<(&'static str, PluginStats)> {
        self.scores
            .iter()
            .map(|(p, _)| (p.name(), p.stats()))
            .collect()
    }

    /// How many scores plugins returned outside `0..=100` or non-finite (clamped).
    pub fn score_violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }

    /// Ranks `cands` for `req` (aggregated serving, spec §3.1 step 2): runs every filter,
    /// sums `weight × score` of every score plugin, and returns the best `top_n` endpoints,
    /// best first, ties by ascending id (candidates tied for the best total take turns across
    /// calls, see [`Decision::ranked`]).
    ///
    /// # Errors
    /// [`Error::NoCandidates`] for an empty slice, [`Error::AllFiltered`] when a filter
    /// leaves nothing.
    pub fn schedule(&self, req: &Request<'_>, cands: &[Candidate]) -> Result<Decision> {
        if cands.is_empty() {
            return Err(Error::NoCandidates);
        }
        let idx: Vec<usize> = (0..cands.len()).collect();
        let r = self.rank(req, cands, &idx, self.top_n)?;
        Ok(Decision {
            ranked: r.ranked,
            match_ratios: r.match_ratios,
            plugin_timings: r.timings,
        })
    }

    /// Pairs decode and prefill endpoints (spec §3.1 step 3): ranks the decode endpoints
    /// (top `top_n`), then for each picks the best prefill endpoint with the same group
    /// value after filters and scores. Candidates without a [`PdMember`](crate::PdMember)
    /// are ignored.
    ///
    /// # Errors
    /// [`Error::NoDecode`] when no candidate has the decode role, [`Error::AllFiltered`]
    /// when the filters reject every decode endpoint, [`Error::NoPdPairs`] when no decode
    /// endpoint has a usable prefill endpoint in its group.
    pub fn schedule_pd(&self, req: &Request<'_>, cands: &[Candidate]) -> Result<PdDecision> {
        let decode: Vec<usize> = role_indices(cands, PdRole::Decode, None);
        if decode.is_empty() {
            return Err(Error::NoDecode);
        }
        let decodes = self.rank(req, cands, &decode, self.top_n)?;
        let mut pairs = Vec::with_capacity(decodes.ranked.len());
        for d in decodes.ranked {
            let group = cands[d.index].pd.as_ref().map(|p| p.group.as_str());
            let prefill = role_indices(cands, PdRole::Prefill, group);
            if prefill.is_empty() {
                continue;
            }
            match self.rank(req, cands, &prefill, 1) {
                Ok(mut p) => {
                    if let Some(best) = p.ranked.drain(..).next() {
                        pairs.push(PdPair {
                            decode: d,
                            prefill: best,
                        });
                    }
                }
                Err(Error::AllFiltered { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if pairs.is_empty() {
            return Err(Error::NoPdPairs);
        }
        Ok(PdDecision { pairs })
    }

    /// Tells the plugins that `req` was sent to `chosen` (for PD: call it for the decode and
    /// for the prefill endpoint). Cache-affinity plugins record that `chosen` now holds the
    /// request's prefix.
    pub fn on_scheduled(&self, req: &Request<'_>, chosen: &Candidate) {
        for (p, _) in &self.scores {
            p.on_scheduled(req, chosen);
        }
    }

    /// Tells the plugins that a scheduled request finished.
    pub fn on_completed(&self, done: &Completion<'_>) {
        for (p, _) in &self.scores {
            p.on_completed(done);
        }
    }

    /// Tells every plugin (and the KV index) to forget an endpoint.
    pub fn on_endpoint_removed(&self, id: &EndpointId) {
        for f in &self.filters {
            f.on_endpoint_removed(id);
        }
        for (p, _) in &self.scores {
            p.on_endpoint_removed(id);
        }
        if let Some(idx) = &self.kv_index {
            idx.remove_endpoint(id);
        }
    }

    fn time(
        &self,
        out: &mut Vec<PluginTiming>,
        plugin: &'static str,
        kind: PluginKind,
        t0: Option<Instant>,
    ) {
        if let (Some(clock), Some(t0)) = (self.clock, t0) {
            out.push(PluginTiming {
                plugin,
                kind,
                seconds: clock().saturating_duration_since(t0).as_secs_f64(),
            });
        }
    }

    fn rank(
        &self,
        req: &Request<'_>,
        all: &[Candidate],
        idx: &[usize],
        limit: usize,
    ) -> Result<Ranking> {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.rank_with(&mut scratch, req, all, idx, limit),
            // Re-entered from a plugin: use fresh buffers.
            Err(_) => self.rank_with(&mut Scratch::default(), req, all, idx, limit),
        })
    }

    fn rank_with(
        &self,
        s: &mut Scratch,
        req: &Request<'_>,
        all: &[Candidate],
        idx: &[usize],
        limit: usize,
    ) -> Result<Ranking> {
        s.idx.clear();
        s.idx.extend_from_slice(idx);
        let mut refs: Vec<&Candidate> = idx.iter().map(|&i| &all[i]).collect();
        let mut timings = Vec::new();
        if !self.filters.is_empty() {
            s.keep.clear();
            s.keep.resize(refs.len(), true);
            for f in &self.filters {
                s.tmp.clear();
                s.tmp.extend_from_slice(&s.keep);
                let t0 = self.clock.map(|c| c());
                f.filter(req, &refs, &mut s.tmp);
                self.time(&mut timings, f.name(), PluginKind::Filter, t0);
                let mut any = false;
                for (k, t) in s.keep.iter_mut().zip(&s.tmp) {
                    *k &= *t;
                    any |= *k;
                }
                if !any {
                    return Err(Error::AllFiltered {
                        plugin: f.name().to_owned(),
                    });
                }
            }
            if s.keep.iter().any(|k| !k) {
                let mut j = 0;
                let keep = &s.keep;
                s.idx.retain(|_| {
                    j += 1;
                    keep[j - 1]
                });
                refs.clear();
                refs.extend(s.idx.iter().map(|&i| &all[i]));
            }
        }
        let n = refs.len();
        s.totals.clear();
        s.totals.resize(n, 0.0);
        let mut match_ratios = Vec::new();
        for (p, w) in &self.scores {
            s.scores.clear();
            s.scores.resize(n, 0.0);
            let t0 = self.clock.map(|c| c());
            let note = p.score(req, &refs, &mut s.scores);
            self.time(&mut timings, p.name(), PluginKind::Score, t0);
            if let Some(r) = note.match_ratio {
                match_ratios.push((p.name(), r));
            }
            for (t, v) in s.totals.iter_mut().zip(&s.scores) {
                let v = if v.is_finite() && (0.0..=100.0).contains(v) {
                    *v
                } else {
                    self.violations.fetch_add(1, Ordering::Relaxed);
                    if v.is_nan() { 0.0 } else { v.clamp(0.0, 100.0) }
                };
                *t += w * v;
            }
        }
        s.order.clear();
        s.order.extend(0..n);
        let totals = &s.totals;
        let cmp = |a: &usize, b: &usize| {
            totals[*b]
                .total_cmp(&totals[*a])
                .then_with(|| refs[*a].id.cmp(&refs[*b].id))
        };
        let limit = limit.min(n);
        if limit < n {
            s.order.select_nth_unstable_by(limit - 1, cmp);
            s.order.truncate(limit);
        }
        s.order.sort_unstable_by(cmp);
        // Candidates tied for the best total take turns: the first such ranking keeps id
        // order, each later one starts one further. Always picking the smallest id would
        // send every request to one endpoint while the scores cannot tell them apart
        // (`least-latency` before any endpoint has latency data; Go's map order spreads them).
        let tied = s
            .order
            .iter()
            .take_while(|&&k| totals[k] == totals[s.order[0]])
            .count();
        if tied > 1 {
            let turn = self.ties.fetch_add(1, Ordering::Relaxed);
            let shift = usize::try_from(turn % tied as u64).unwrap_or(0);
            s.order[..tied].rotate_left(shift);
        }
        let ranked = s
            .order
            .iter()
            .map(|&k| Ranked {
                index: s.idx[k],
                id: refs[k].id.clone(),
                score: totals[k],
            })
            .collect();
        Ok(Ranking {
            ranked,
            match_ratios,
            timings,
        })
    }
}

/// Per-thread buffers reused across `rank` calls (no per-request allocation for masks,
/// scores and ordering).
#[derive(Default)]
struct Scratch {
    idx: Vec<usize>,
    keep: Vec<bool>,
    tmp: Vec<bool>,
    totals: Vec<f64>,
    scores: Vec<f64>,
    order: Vec<usize>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn role_indices(cands: &[Candidate], role: PdRole, group: Option<&str>) -> Vec<usize> {
    cands
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.pd.as_ref()
                .is_some_and(|p| p.role == role && group.is_none_or(|g| p.group == g))
        })
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests;
