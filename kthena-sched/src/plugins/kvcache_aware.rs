//! `kvcache-aware` (Go Kthena `pkg/kthena-router/scheduler/plugins/kvcache_aware.go`): scores
//! endpoints by how many leading token blocks of the prompt they hold, according to a [`KvIndex`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{invalid, ratio_score};
use crate::Result;
use crate::decision::ScoreNote;
use crate::hash::token_block_hashes;
use crate::kv_index::{InMemoryKvIndex, KvIndex, KvQuery};
use crate::plugin::ScorePlugin;
use crate::registry::BuildContext;
use crate::request::{Completion, Request};
use crate::types::Candidate;

/// Args of `kvcache-aware` (Go's `kvcache_aware.go`), plus `maxIndexEntries` for the in-memory
/// index.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KvCacheAwareArgs {
    /// Tokens per block; must equal the engine's KV block size for events to match. Default 16.
    pub block_size_to_hash: usize,
    /// At most this many leading blocks are matched. Default 128.
    pub max_blocks_to_match: usize,
    /// Port of a vLLM engine's `/tokenize` (used by hosts that tokenize remotely, not by this
    /// crate). `1..=65535`, default 8000.
    pub vllm_tokenizer_port: u32,
    /// Port of an SGLang engine's `/tokenize` (used by hosts, not by this crate).
    /// `1..=65535`, default 30000.
    pub sglang_tokenizer_port: u32,
    /// Cap of the in-memory index, in (endpoint, block) entries. Default 1,048,576 (2^20, the
    /// size cap of Dynamo's approximate KV index, `router_max_tree_size`). Not in Go Kthena.
    pub max_index_entries: usize,
}

impl Default for KvCacheAwareArgs {
    /// `blockSizeToHash: 16, maxBlocksToMatch: 128, vllmTokenizerPort: 8000,
    /// sglangTokenizerPort: 30000, maxIndexEntries: 1048576`.
    fn default() -> Self {
        Self {
            block_size_to_hash: 16,
            max_blocks_to_match: 128,
            vllm_tokenizer_port: 8000,
            sglang_tokenizer_port: 30000,
            max_index_entries: 1 << 20,
        }
    }
}

impl KvCacheAwareArgs {
    /// Checks every value.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`](crate::Error::InvalidArgs) for a zero block size, block count or
    /// index cap, or a port outside `1..=65535` (Go Kthena silently uses the default then).
    pub fn validate(self) -> Result<Self> {
        for (k, v) in [
            ("blockSizeToHash", self.block_size_to_hash),
            ("maxBlocksToMatch", self.max_blocks_to_match),
            ("maxIndexEntries", self.max_index_entries),
        ] {
            if v == 0 {
                return Err(invalid("kvcache-aware", format!("{k} must be > 0")));
            }
        }
        for (k, v) in [
            ("vllmTokenizerPort", self.vllm_tokenizer_port),
            ("sglangTokenizerPort", self.sglang_tokenizer_port),
        ] {
            if !(1..=65535).contains(&v) {
                return Err(invalid(
                    "kvcache-aware",
                    format!("{k} must be in 1..=65535, got {v}"),
                ));
            }
        }
        Ok(self)
    }
}

/// `kvcache-aware` (Go Kthena `plugins/kvcache_aware.go`).
///
/// Cuts the request's token ids into blocks of `blockSizeToHash` (the last may be short), at
/// most `maxBlocksToMatch`, hashes them with [`token_block_hashes`], asks the [`KvIndex`] for
/// each candidate's contiguous match from block 0, and scores
/// `trunc(matched / total_blocks × 100)`. A request without token ids scores every candidate 0.
/// Reports `longest match / total blocks` as its match ratio.
///
/// Differences from Go Kthena: no remote tokenization (the host passes token ids), and the
/// index is in-process and fed by KV events instead of a Redis round-trip per request.
#[derive(Debug)]
pub struct KvCacheAware {
    args: KvCacheAwareArgs,
    index: Arc<dyn KvIndex>,
}

impl KvCacheAware {
    /// A plugin over `index`.
    ///
    /// # Errors
    /// As [`KvCacheAwareArgs::validate`].
    pub fn new(args: KvCacheAwareArgs, index: Arc<dyn KvIndex>) -> Result<Self> {
        Ok(Self {
            args: args.validate()?,
            index,
        })
    }

    pub(crate) fn from_context(args: KvCacheAwareArgs, ctx: &BuildContext) -> Result<Self> {
        let args = args.validate()?;
        let index = shared_index(
            ctx,
            "kvcache-aware",
            (args.block_size_to_hash, args.max_blocks_to_match),
            args.max_index_entries,
        )?;
        Self::new(args, index)
    }

    /// The index this plugin reads.
    pub fn index(&self) -> &Arc<dyn KvIndex> {
        &self.index
    }
}

impl ScorePlugin for KvCacheAware {
    fn name(&self) -> &'static str {
        "kvcache-aware"
    }

    fn score(&self, req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        out.fill(0.0);
        let Some(tokens) = req.token_ids.filter(|t| !t.is_empty()) else {
            return ScoreNote::default();
        };
        let (matched, total) = match_blocks(
            self.index.as_ref(),
            req,
            tokens,
            (self.args.block_size_to_hash, self.args.max_blocks_to_match),
            cands,
        );
        let mut longest = 0;
        for (o, m) in out.iter_mut().zip(&matched) {
            longest = longest.max(*m as usize);
            *o = ratio_score(*m as usize, total);
        }
        ScoreNote::with_match_ratio(longest as f64 / total as f64)
    }

    /// The chained token-block hashes of the prompt (nothing without token ids).
    fn completion_blocks(&self, req: &Request<'_>) -> Option<Arc<[u64]>> {
        token_blocks(
            req,
            self.args.block_size_to_hash,
            self.args.max_blocks_to_match,
        )
    }

    /// Records the prompt's full blocks as provisionally held by `chosen`
    /// ([`KvIndex::record_routed`]) and as pinned there until the request ends.
    fn on_scheduled(&self, req: &Request<'_>, chosen: &Candidate) {
        record_routed(
            self.index.as_ref(),
            req,
            self.args.block_size_to_hash,
            self.args.max_blocks_to_match,
            chosen,
        );
    }

    /// Releases the blocks [`on_scheduled`](Self::on_scheduled) pinned.
    fn on_completed(&self, done: &Completion, _success: bool) {
        unpin_completed(
            self.index.as_ref(),
            done,
            self.name(),
            self.args.block_size_to_hash,
        );
    }
}

/// The block hashes of `tokens` (at most `max_blocks` blocks of `block_size`) as a query.
fn with_query<R>(
    model: &str,
    tokens: &[u32],
    block_size: usize,
    max_blocks: usize,
    f: impl FnOnce(&KvQuery<'_>) -> R,
) -> R {
    let mut hashes = Vec::with_capacity(max_blocks.min(1024));
    token_block_hashes(tokens, block_size, max_blocks, &mut hashes);
    f(&KvQuery {
        model,
        token_ids: tokens,
        block_size,
        block_hashes: &hashes,
    })
}

/// Each candidate's contiguous match (in blocks) and the number of blocks looked up (`>= 1`
/// for non-empty `tokens`), for blocks of `block_size` tokens, at most `max_blocks`: from
/// the request's [`Prefetch`](crate::Prefetch) when it has this lookup (unanswered: no
/// match), else from `index`.
pub(crate) fn match_blocks(
    index: &dyn KvIndex,
    req: &Request<'_>,
    tokens: &[u32],
    (block_size, max_blocks): (usize, usize),
    cands: &[&Candidate],
) -> (Vec<u32>, usize) {
    if let Some(l) = req.prefetch.and_then(|p| p.lookup(req.model, block_size)) {
        let total = tokens.len().div_ceil(block_size).min(max_blocks);
        let cap = u32::try_from(total).unwrap_or(u32::MAX);
        let matched = cands.iter().map(|c| l.matched(&c.id).min(cap)).collect();
        return (matched, total);
    }
    with_query(req.model, tokens, block_size, max_blocks, |q| {
        let mut matched = vec![0u32; cands.len()];
        index.match_prefix(q, cands, &mut matched);
        (matched, q.block_hashes.len())
    })
}

/// The chained hashes of the request's token blocks (`None` without token ids).
pub(crate) fn token_blocks(
    req: &Request<'_>,
    block_size: usize,
    max_blocks: usize,
) -> Option<Arc<[u64]>> {
    let tokens = req.token_ids.filter(|t| !t.is_empty())?;
    let mut hashes = Vec::with_capacity(max_blocks.min(1024));
    token_block_hashes(tokens, block_size, max_blocks, &mut hashes);
    Some(hashes.into())
}

/// Hashes the request's token ids in blocks and tells `index` they were routed to `chosen`,
/// provisionally ([`KvIndex::record_routed`]) and pinned until the request ends
/// ([`KvIndex::pin_routed`], released by [`unpin_completed`]); nothing for a request without
/// token ids.
pub(crate) fn record_routed(
    index: &dyn KvIndex,
    req: &Request<'_>,
    block_size: usize,
    max_blocks: usize,
    chosen: &Candidate,
) {
    if let Some(tokens) = req.token_ids.filter(|t| !t.is_empty()) {
        with_query(req.model, tokens, block_size, max_blocks, |q| {
            index.record_routed(&chosen.id, q);
            index.pin_routed(&chosen.id, q);
        });
    }
}

/// Releases the blocks [`record_routed`] pinned for a request that ended: the full blocks
/// among the hashes `plugin` kept in `done` ([`ScorePlugin::completion_blocks`]).
pub(crate) fn unpin_completed(
    index: &dyn KvIndex,
    done: &Completion,
    plugin: &str,
    block_size: usize,
) {
    if let Some(blocks) = done.blocks(plugin) {
        let full = usize::try_from(done.prompt_tokens / block_size.max(1) as u64)
            .unwrap_or(usize::MAX)
            .min(blocks.len());
        index.unpin_routed(&done.endpoint, &blocks[..full]);
    }
}

/// The KV index shared by the plugins of one scheduler: the host's, or an
/// [`InMemoryKvIndex`] of `block_size` and `cap` created by the first plugin that asks.
///
/// # Errors
/// [`Error::InvalidArgs`](crate::Error::InvalidArgs) for `plugin` when the index cannot be
/// created or its block size differs from `block_size` (it would never match).
pub(crate) fn shared_index(
    ctx: &BuildContext,
    plugin: &str,
    (block_size, max_blocks): (usize, usize),
    cap: usize,
) -> Result<Arc<dyn KvIndex>> {
    let index = ctx.kv_index_or_try_init(|| {
        // Kept across reconfigurations while the block size and the cap stay the same.
        let key = format!("kv-index/blockSizeToHash={block_size}/maxIndexEntries={cap}");
        let kept = ctx.state(&key, || {
            InMemoryKvIndex::new(block_size, cap).map(|i| Arc::new(i) as Arc<dyn KvIndex>)
        })?;
        Ok(Arc::clone(&kept))
    })?;
    if let Some(other) = index.block_size().filter(|b| *b != block_size) {
        return Err(invalid(
            plugin,
            format!(
                "blockSizeToHash {block_size} differs from the shared KV index's block size \
                 {other} (kvcache-aware and least-prefill share one index: give both the same \
                 blockSizeToHash)"
            ),
        ));
    }
    ctx.kv_lookup(block_size, max_blocks);
    Ok(index)
}
