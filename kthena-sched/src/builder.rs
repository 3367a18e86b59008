//! Building a [`Scheduler`]: [`SchedulerBuilder`], and rebuilding one for a new
//! configuration with its plugin state ([`Scheduler::reconfigure`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError};

use crate::config::Config;
use crate::framework::{Clock, DEFAULT_TOP_N, Scheduler, TieTurns};
use crate::kv_index::KvIndex;
use crate::registry::{BuildContext, KeptState, Rebuild, Registry};
use crate::{Error, Result};

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
    previous: KeptState,
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

    /// Drops a KV index given with [`kv_index`](Self::kv_index) (or carried over by
    /// [`Scheduler::rebuild`]): the plugins that need one create an in-memory index.
    pub fn without_kv_index(mut self) -> Self {
        self.kv_index = None;
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
        let injected = self.kv_index.is_some();
        let ctx = BuildContext::new(self.seed, self.previous);
        if let Some(idx) = self.kv_index {
            let _ = ctx.kv_index.set(idx);
        }
        check_configured_args(&config, &self.registry, self.seed)?;
        let reg = &self.registry;
        let mut filters = Vec::new();
        for name in &config.plugins.filter.enabled {
            let factory = reg.filters.get(name).ok_or_else(|| {
                let other = reg.scores.contains_key(name);
                not_found(other, "plugins.Filter.enabled", name, "score")
            })?;
            filters.push(factory(config.args(name), &ctx).map_err(|e| in_args(&config, name, e))?);
        }
        let mut scores = Vec::new();
        for wp in &config.plugins.score.enabled {
            let factory = reg.scores.get(&wp.name).ok_or_else(|| {
                let other = reg.filters.contains_key(&wp.name);
                not_found(other, "plugins.Score.enabled", &wp.name, "filter")
            })?;
            let plugin =
                factory(config.args(&wp.name), &ctx).map_err(|e| in_args(&config, &wp.name, e))?;
            scores.push((plugin, wp.weight));
        }
        let kept = ctx
            .kept
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let kv_lookups = ctx
            .kv_lookups
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(Scheduler {
            filters,
            scores,
            top_n: self.top_n,
            kv_index: ctx.kv_index.into_inner(),
            clock: self.clock,
            violations: AtomicU64::new(0),
            ties: TieTurns::default(),
            rebuild: Rebuild {
                registry: self.registry,
                seed: self.seed,
                injected,
                kept,
                kv_lookups,
            },
        })
    }
}

/// Every `pluginConfig` entry names a known plugin, and the args of configured but disabled
/// plugins are valid too (built in a throwaway context), so a typo never waits until the
/// plugin is switched on.
fn check_configured_args(config: &Config, registry: &Registry, seed: u64) -> Result<()> {
    for pc in &config.plugin_config {
        if !registry.knows(&pc.name) {
            return Err(Error::UnknownPlugin {
                list: "pluginConfig",
                name: pc.name.clone(),
            });
        }
        let enabled = config.plugins.filter.enabled.contains(&pc.name)
            || (config.plugins.score.enabled.iter()).any(|w| w.name == pc.name);
        if !enabled {
            let scratch = BuildContext::new(seed, KeptState::default());
            if let Some(f) = registry.filters.get(&pc.name) {
                f(&pc.args, &scratch).map_err(|e| in_args(config, &pc.name, e))?;
            }
            if let Some(f) = registry.scores.get(&pc.name) {
                f(&pc.args, &scratch).map_err(|e| in_args(config, &pc.name, e))?;
            }
        }
    }
    Ok(())
}

/// A name missing from its list's factories: [`Error::WrongPluginKind`] when the other
/// kind has it (`other`, a `kind` plugin), else [`Error::UnknownPlugin`].
fn not_found(other: bool, list: &'static str, name: &str, kind: &'static str) -> Error {
    let name = name.to_owned();
    if other {
        Error::WrongPluginKind { list, name, kind }
    } else {
        Error::UnknownPlugin { list, name }
    }
}

/// Puts `pluginConfig[i].args` before the path of an args error of plugin `name`.
fn in_args(config: &Config, name: &str, e: Error) -> Error {
    match config.plugin_config.iter().position(|p| p.name == name) {
        Some(i) if e.path().is_some() => e.under(&format!("pluginConfig[{i}].args")),
        _ => e,
    }
}

// === impl Scheduler (building) ===

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
            previous: KeptState::default(),
        }
    }

    /// A builder for `config` that starts from this scheduler: same registry, seed, `top_n`,
    /// clock and host KV index (each can still be changed on the builder), and the plugin
    /// state this one kept ([`BuildContext::state`]) carried over to the plugins that ask for
    /// it again.
    ///
    /// What survives, with the built-in plugins: `prefix-cache`'s store while its
    /// `blockSizeToHash` and `maxHashCacheSize` stay the same; the KV index of
    /// `kvcache-aware` / `least-prefill` while its block size and `maxIndexEntries` stay the
    /// same (a host index given with [`SchedulerBuilder::kv_index`] is always kept). A plugin
    /// that is no longer enabled loses its state; the turn counters of ties start over.
    pub fn rebuild(&self, config: Config) -> SchedulerBuilder {
        let r = &self.rebuild;
        SchedulerBuilder {
            config,
            registry: r.registry.clone(),
            seed: r.seed,
            top_n: self.top_n,
            kv_index: if r.injected {
                self.kv_index.clone()
            } else {
                None
            },
            clock: self.clock,
            previous: r.kept.clone(),
        }
    }

    /// A new scheduler for `config` that keeps this one's plugin state: the prefix-cache
    /// and KV indexes survive a configuration change (see [`rebuild`](Self::rebuild) for
    /// what is kept). This scheduler is unchanged and still usable; both share the kept
    /// state until it is dropped, so requests scheduled by the old one and completed after
    /// the switch still count.
    ///
    /// ```
    /// use kthena_sched::{Candidate, Config, Request, Scheduler};
    ///
    /// let old = Scheduler::from_config(&Config::from_yaml(
    ///     "plugins: {Score: {enabled: [{name: prefix-cache, weight: 1}]}}",
    /// )?)?;
    /// let cands = vec![Candidate::new("a", "m"), Candidate::new("b", "m")];
    /// let req = Request::new("m").with_prompt("a long shared system prompt");
    /// let _done = old.on_scheduled(&req, &cands[1]);
    ///
    /// // A new weight and a new plugin: the prefix store is carried over.
    /// let new = old.reconfigure(&Config::from_yaml("
    /// plugins: {Score: {enabled: [{name: prefix-cache, weight: 2}, {name: least-request, weight: 1}]}}
    /// ")?)?;
    /// let d = new.schedule(&req, &cands)?;
    /// assert_eq!(d.best().id.as_str(), "b");
    /// assert_eq!(d.match_ratios, [("prefix-cache", 1.0)]);
    /// # Ok::<(), kthena_sched::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`SchedulerBuilder::build`].
    pub fn reconfigure(&self, config: &Config) -> Result<Self> {
        self.rebuild(config.clone()).build()
    }
}

#[cfg(test)]
mod tests;
