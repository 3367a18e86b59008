//! The plugin registry and the build context handed to plugin factories, with the state
//! kept across [`Scheduler::reconfigure`](crate::Scheduler::reconfigure).

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::kv_index::KvIndex;
use crate::plugin::{FilterPlugin, ScorePlugin};
use crate::{FastMap, Result};

/// What a [`Scheduler`] remembers to build its successor ([`Scheduler::rebuild`]).
#[derive(Debug)]
pub(crate) struct Rebuild {
    pub(crate) registry: Registry,
    pub(crate) seed: u64,
    /// Whether the KV index was given by the host ([`SchedulerBuilder::kv_index`]).
    pub(crate) injected: bool,
    pub(crate) kept: KeptState,
    /// `(block size, max blocks)` of the KV-index lookups the plugins make.
    pub(crate) kv_lookups: Vec<(usize, usize)>,
}

/// State kept across [`Scheduler::reconfigure`]: values by key ([`BuildContext::state`]).
pub(crate) type KeptState = FastMap<String, Arc<dyn Any + Send + Sync>>;

/// Everything a plugin factory may use besides its `args`.
#[derive(Debug)]
pub struct BuildContext {
    seed: u64,
    pub(crate) kv_index: OnceLock<Arc<dyn KvIndex>>,
    /// What the scheduler being reconfigured kept (empty for a first build).
    previous: KeptState,
    /// What this build's plugins asked for.
    pub(crate) kept: Mutex<KeptState>,
    /// `(block size, max blocks)` of every KV-index lookup the plugins make.
    pub(crate) kv_lookups: Mutex<Vec<(usize, usize)>>,
}

impl BuildContext {
    pub(crate) fn new(seed: u64, previous: KeptState) -> Self {
        Self {
            seed,
            kv_index: OnceLock::new(),
            previous,
            kept: Mutex::new(KeptState::default()),
            kv_lookups: Mutex::new(Vec::new()),
        }
    }

    /// Seed for any plugin randomness (`random`); plugins derive their RNG from it.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The shared KV-cache index: the one the host injected with
    /// [`SchedulerBuilder::kv_index`], else the one `make` creates (once).
    pub fn kv_index_or_init(&self, make: impl FnOnce() -> Arc<dyn KvIndex>) -> Arc<dyn KvIndex> {
        Arc::clone(self.kv_index.get_or_init(make))
    }

    /// As [`kv_index_or_init`](Self::kv_index_or_init) with a fallible `make` (nothing is
    /// stored on error).
    pub(crate) fn kv_index_or_try_init(
        &self,
        make: impl FnOnce() -> Result<Arc<dyn KvIndex>>,
    ) -> Result<Arc<dyn KvIndex>> {
        if let Some(i) = self.kv_index.get() {
            return Ok(Arc::clone(i));
        }
        let made = make()?;
        Ok(Arc::clone(self.kv_index.get_or_init(|| made)))
    }

    /// State that survives [`Scheduler::reconfigure`]: the value an earlier plugin of this
    /// build stored under `key`, else the one the scheduler being reconfigured kept under
    /// `key`, else the one `make` creates. The built scheduler keeps every value asked for,
    /// and drops what the previous one kept under keys nobody asked for again.
    ///
    /// Put every argument the state depends on in the key, so that a changed argument
    /// starts fresh state: `prefix-cache` keeps its [`PrefixStore`](crate::PrefixStore)
    /// under `prefix-cache/blockSizeToHash=64/maxHashCacheSize=50000`. A kept value of
    /// another type than `T` is replaced by `make`'s.
    ///
    /// # Errors
    /// `make`'s error.
    pub fn state<T: Any + Send + Sync>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let found = kept
            .get(key)
            .or_else(|| self.previous.get(key))
            .and_then(|v| Arc::clone(v).downcast::<T>().ok());
        let value = match found {
            Some(v) => v,
            None => Arc::new(make()?),
        };
        kept.insert(
            key.to_owned(),
            Arc::clone(&value) as Arc<dyn Any + Send + Sync>,
        );
        Ok(value)
    }

    /// A plugin will look up `max_blocks` blocks of `block_size` tokens in the KV index per
    /// request ([`Scheduler::prepare`] fetches them ahead for a remote index).
    pub(crate) fn kv_lookup(&self, block_size: usize, max_blocks: usize) {
        let mut l = self
            .kv_lookups
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match l.iter_mut().find(|(b, _)| *b == block_size) {
            Some((_, m)) => *m = (*m).max(max_blocks),
            None => l.push((block_size, max_blocks)),
        }
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
    pub(crate) filters: HashMap<String, FilterFactory>,
    pub(crate) scores: HashMap<String, ScoreFactory>,
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

    pub(crate) fn knows(&self, name: &str) -> bool {
        self.filters.contains_key(name) || self.scores.contains_key(name)
    }
}
