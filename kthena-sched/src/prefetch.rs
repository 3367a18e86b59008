//! The non-blocking path for a remote KV index: the host fetches the KV-index lookups of a
//! request before scheduling ([`Scheduler::prepare`](crate::Scheduler::prepare)), so that
//! [`Scheduler::schedule`](crate::Scheduler::schedule) never waits on I/O.

use std::sync::Arc;

use crate::FastMap;
use crate::hash::token_block_hashes;
use crate::kv_index::{KvIndex, KvQuery};
use crate::types::{Candidate, EndpointId};

/// The KV-index lookups one request will make, owned (`Send`, no borrow of the request), for
/// the host to answer before scheduling: one [`KvLookup`] per block size the enabled plugins
/// use. Attach the answered prefetch to the request with
/// [`Request::with_prefetch`](crate::Request::with_prefetch); the plugins then read the
/// answers instead of calling [`KvIndex::match_prefix`].
///
/// ```
/// use std::sync::Arc;
/// use kthena_sched::{Candidate, Config, EndpointId, KvEvent, KvIndex, KvQuery, Request, Scheduler};
///
/// /// An index whose data lives elsewhere (a database): `match_prefix` would block.
/// #[derive(Debug)]
/// struct Remote;
/// impl KvIndex for Remote {
///     fn apply(&self, _: &EndpointId, _: &KvEvent) -> kthena_sched::Result<()> { Ok(()) }
///     fn match_prefix(&self, _: &KvQuery<'_>, _: &[&Candidate], _: &mut [u32]) {
///         unreachable!("schedule reads the prefetched answers")
///     }
///     fn remove_endpoint(&self, _: &EndpointId) {}
///     fn block_size(&self) -> Option<usize> { None }
///     fn len(&self) -> usize { 0 }
///     fn is_remote(&self) -> bool { true }
/// }
///
/// let config = Config::from_yaml("
/// pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 2}}]
/// plugins: {Score: {enabled: [{name: kvcache-aware, weight: 1}]}}
/// ")?;
/// let sched = Scheduler::builder(config).kv_index(Arc::new(Remote)).build()?;
/// let cands = vec![Candidate::new("a", "m"), Candidate::new("b", "m")];
/// let tokens = [1, 2, 3, 4, 5, 6];
/// let req = Request::new("m").with_token_ids(&tokens);
///
/// let mut prefetch = sched.prepare(&req).expect("a remote index is fetched ahead");
/// // The host does the I/O (on its own runtime), then answers: "b" holds 2 leading blocks.
/// let lookup = &mut prefetch.lookups_mut()[0];
/// assert_eq!((lookup.block_size(), lookup.block_hashes().len()), (2, 3));
/// lookup.answer([(EndpointId::new("b"), 2)]);
///
/// let decision = sched.schedule(&req.with_prefetch(&prefetch), &cands)?;
/// assert_eq!(decision.best().id.as_str(), "b");
/// assert_eq!(decision.best().score, 66.0); // trunc(2 / 3 × 100)
/// # Ok::<(), kthena_sched::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Prefetch {
    model: Arc<str>,
    lookups: Vec<KvLookup>,
}

/// One KV-index lookup of a [`Prefetch`]: the prompt's leading token blocks at one block
/// size, and (once the host answered) how many of them each endpoint holds.
#[derive(Debug, Clone, PartialEq)]
pub struct KvLookup {
    model: Arc<str>,
    block_size: usize,
    token_ids: Vec<u32>,
    block_hashes: Vec<u64>,
    /// Blocks held per endpoint, counted from block 0 without gaps; `None` until answered.
    matched: Option<FastMap<EndpointId, u32>>,
}

// === impl Prefetch ===

impl Prefetch {
    /// Lookups of `max_blocks` blocks of `block_size` tokens of `tokens`, one per
    /// `(block size, max blocks)` pair.
    pub(crate) fn new(model: &str, tokens: &[u32], lookups: &[(usize, usize)]) -> Self {
        let model: Arc<str> = model.into();
        let lookups = lookups
            .iter()
            .filter(|(bs, _)| *bs > 0)
            .map(|&(block_size, max_blocks)| {
                let mut block_hashes = Vec::new();
                token_block_hashes(tokens, block_size, max_blocks, &mut block_hashes);
                let n = (block_hashes.len() * block_size).min(tokens.len());
                KvLookup {
                    model: Arc::clone(&model),
                    block_size,
                    token_ids: tokens[..n].to_vec(),
                    block_hashes,
                    matched: None,
                }
            })
            .collect();
        Self { model, lookups }
    }

    /// The request's model name (the lookups only apply to requests of this model).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The lookups to answer.
    pub fn lookups(&self) -> &[KvLookup] {
        &self.lookups
    }

    /// The lookups to answer, mutably ([`KvLookup::answer`]).
    pub fn lookups_mut(&mut self) -> &mut [KvLookup] {
        &mut self.lookups
    }

    /// Whether every lookup has an answer.
    pub fn is_answered(&self) -> bool {
        self.lookups.iter().all(KvLookup::is_answered)
    }

    /// Answers every lookup from `index` for `cands` ([`KvLookup::answer_from`]): for a host
    /// that runs this off its async threads (a blocking pool) with a remote index whose
    /// [`KvIndex::match_prefix`] does the I/O.
    pub fn answer_from(&mut self, index: &dyn KvIndex, cands: &[&Candidate]) {
        for l in &mut self.lookups {
            l.answer_from(index, cands);
        }
    }

    /// The lookup for `model` at `block_size`, if this prefetch has one.
    pub(crate) fn lookup(&self, model: &str, block_size: usize) -> Option<&KvLookup> {
        if *self.model != *model {
            return None;
        }
        self.lookups.iter().find(|l| l.block_size == block_size)
    }

    /// The lookup with the most blocks (for a KV index that matches any block size).
    pub(crate) fn longest(&self, model: &str) -> Option<&KvLookup> {
        if *self.model != *model {
            return None;
        }
        self.lookups.iter().max_by_key(|l| l.block_hashes.len())
    }
}

// === impl KvLookup ===

impl KvLookup {
    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The prompt's token ids the lookup covers (at most `block_size × max_blocks`).
    pub fn token_ids(&self) -> &[u32] {
        &self.token_ids
    }

    /// Chained hashes of the blocks ([`token_block_hashes`](crate::token_block_hashes)).
    pub fn block_hashes(&self) -> &[u64] {
        &self.block_hashes
    }

    /// The lookup as the query [`KvIndex::match_prefix`] takes.
    pub fn query(&self) -> KvQuery<'_> {
        KvQuery {
            model: &self.model,
            token_ids: &self.token_ids,
            block_size: self.block_size,
            block_hashes: &self.block_hashes,
        }
    }

    /// Records the answer: the number of blocks each endpoint holds, counted from block 0
    /// without gaps (values above the lookup's block count are capped). Endpoints not listed
    /// hold none. A later answer replaces an earlier one.
    pub fn answer(&mut self, matched: impl IntoIterator<Item = (EndpointId, u32)>) {
        let cap = u32::try_from(self.block_hashes.len()).unwrap_or(u32::MAX);
        self.matched = Some(
            matched
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(id, n)| (id, n.min(cap)))
                .collect(),
        );
    }

    /// Answers from `index` for `cands` (one [`KvIndex::match_prefix`] call).
    pub fn answer_from(&mut self, index: &dyn KvIndex, cands: &[&Candidate]) {
        let mut out = vec![0u32; cands.len()];
        index.match_prefix(&self.query(), cands, &mut out);
        self.answer(cands.iter().map(|c| c.id.clone()).zip(out));
    }

    /// Whether [`answer`](Self::answer) was called.
    pub fn is_answered(&self) -> bool {
        self.matched.is_some()
    }

    /// Blocks `id` holds according to the answer (0 when unanswered or not listed).
    pub fn matched(&self, id: &EndpointId) -> u32 {
        self.matched
            .as_ref()
            .and_then(|m| m.get(id))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
