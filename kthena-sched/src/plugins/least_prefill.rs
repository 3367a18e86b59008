//! `least-prefill`: scores endpoints by how soon they would finish this request's prefill:
//! the prompt tokens already waiting for prefill there, plus this request's tokens the
//! endpoint does not hold in its KV cache. Not in Go Kthena.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::invalid;
use super::kvcache_aware::{
    match_blocks, record_routed, shared_index, token_blocks, unpin_completed,
};
use crate::Result;
use crate::decision::ScoreNote;
use crate::kv_index::KvIndex;
use crate::plugin::ScorePlugin;
use crate::registry::BuildContext;
use crate::request::{Completion, Request, estimated_tokens};
use crate::types::Candidate;

/// Args of `least-prefill`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LeastPrefillArgs {
    /// Tokens per block; must equal the engines' KV block size, and `kvcache-aware`'s
    /// `blockSizeToHash` when both are configured (they share one index). Default 16.
    pub block_size_to_hash: usize,
    /// At most this many leading blocks are matched. Default 1024 (16,384 tokens at the
    /// default block size).
    pub max_blocks_to_match: usize,
    /// Weight of the request's own uncached tokens against the tokens already queued, a
    /// factor `> 0`. At 1 the plugin picks the endpoint where this request's first token
    /// comes soonest; above 1 it prefers the endpoint that already holds the prefix even
    /// when that one is busier, because tokens computed twice on two endpoints cost every
    /// later request of the prefix too. Default 2.
    pub uncached_weight: f64,
    /// Prompt tokens of prefill one request that is decoding on the endpoint (sent, first
    /// token received, not ended) counts as, a finite number `>= 0`. Without it the cost
    /// sees no load at all when every prefill is short (follow-up turns of cached
    /// conversations: the prefill queue is empty at nearly every decision), and cache
    /// affinity alone decides. Default 0 (off): 256 (about the engine time a running
    /// sequence adds to the decode steps of a typical answer, in prefill tokens) evened
    /// out agent sessions but cost 3% of throughput on the published `long` workload
    /// (`docs/scheduler.md`).
    pub decoding_request_tokens: f64,
    /// Cap of the in-memory index when this plugin creates it (when `kvcache-aware` is not
    /// configured), in (endpoint, block) entries. Default 1,048,576.
    pub max_index_entries: usize,
}

impl Default for LeastPrefillArgs {
    /// `blockSizeToHash: 16, maxBlocksToMatch: 1024, uncachedWeight: 2,
    /// decodingRequestTokens: 0, maxIndexEntries: 1048576`.
    fn default() -> Self {
        Self {
            block_size_to_hash: 16,
            max_blocks_to_match: 1024,
            uncached_weight: 2.0,
            decoding_request_tokens: 0.0,
            max_index_entries: 1 << 20,
        }
    }
}

impl LeastPrefillArgs {
    /// Checks every value.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`](crate::Error::InvalidArgs) for a zero block size, block count
    /// or index cap, an `uncachedWeight` that is not a finite number `> 0`, or a
    /// `decodingRequestTokens` that is not a finite number `>= 0`.
    pub fn validate(self) -> Result<Self> {
        for (k, v) in [
            ("blockSizeToHash", self.block_size_to_hash),
            ("maxBlocksToMatch", self.max_blocks_to_match),
            ("maxIndexEntries", self.max_index_entries),
        ] {
            if v == 0 {
                return Err(invalid("least-prefill", format!("{k} must be > 0")));
            }
        }
        if !(self.uncached_weight.is_finite() && self.uncached_weight > 0.0) {
            return Err(invalid(
                "least-prefill",
                format!(
                    "uncachedWeight must be a number > 0, got {}",
                    self.uncached_weight
                ),
            ));
        }
        let d = self.decoding_request_tokens;
        if !(d.is_finite() && d >= 0.0) {
            return Err(invalid(
                "least-prefill",
                format!("decodingRequestTokens must be a number >= 0, got {d}"),
            ));
        }
        Ok(self)
    }
}

/// `least-prefill`: a cost-based score plugin that joins cache affinity and load.
///
/// For each candidate `i` it estimates the prefill work ahead of the request's first token,
/// in tokens:
///
/// ```text
/// cost_i = pending_prefill_tokens_i + decodingRequestTokens × decoding_i
///        + uncachedWeight × (prompt_tokens − cached_tokens_i) + 1
/// score_i = 100 × min_j(cost_j) / cost_i
/// ```
///
/// `decoding_i` is the endpoint's requests past their first token
/// (`in_flight − awaiting_first_token`): the decode work the new request shares the engine
/// with.
///
/// `pending_prefill_tokens_i` is the host-tracked [`Metrics::pending_prefill_tokens`]
/// (requests sent and not yet answered with a first byte); `cached_tokens_i` is the
/// candidate's contiguous prefix match in the shared [`KvIndex`] times the block size, the
/// same index `kvcache-aware` uses (fed by KV events), created here when `kvcache-aware` is
/// not configured. The plugin records every routed request in the index
/// ([`KvIndex::record_routed`]), so it also works without KV events, like Dynamo's
/// approximate mode. A request without token ids counts `ceil(prompt bytes / 4)` tokens
/// (Go Kthena's input-token estimate) and no cache.
///
/// The cost follows the KV router of NVIDIA Dynamo (`kv_router/scheduler.rs`: overlap
/// weight × prefill blocks + decode blocks), with the decode term counted in requests
/// instead of KV blocks and the prefill queue counted by the router instead of scraped, so
/// it reacts within one request instead of one scrape interval.
///
/// [`Metrics::pending_prefill_tokens`]: crate::Metrics::pending_prefill_tokens
#[derive(Debug)]
pub struct LeastPrefill {
    args: LeastPrefillArgs,
    index: Arc<dyn KvIndex>,
}

impl LeastPrefill {
    /// A plugin over `index`.
    ///
    /// # Errors
    /// As [`LeastPrefillArgs::validate`].
    pub fn new(args: LeastPrefillArgs, index: Arc<dyn KvIndex>) -> Result<Self> {
        Ok(Self {
            args: args.validate()?,
            index,
        })
    }

    pub(crate) fn from_context(args: LeastPrefillArgs, ctx: &BuildContext) -> Result<Self> {
        let args = args.validate()?;
        let index = shared_index(
            ctx,
            "least-prefill",
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

impl ScorePlugin for LeastPrefill {
    fn name(&self) -> &'static str {
        "least-prefill"
    }

    fn score(&self, req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        let w = self.args.uncached_weight;
        let load = |c: &Candidate| {
            let m = &c.metrics;
            let decoding = m.in_flight.saturating_sub(m.awaiting_first_token);
            m.pending_prefill_tokens as f64
                + self.args.decoding_request_tokens * f64::from(decoding)
        };
        let mut note = ScoreNote::default();
        let mut cost = vec![0.0f64; cands.len()];
        match req.token_ids.filter(|t| !t.is_empty()) {
            Some(tokens) => {
                let bs = self.args.block_size_to_hash;
                let (matched, total) = match_blocks(
                    self.index.as_ref(),
                    req,
                    tokens,
                    (bs, self.args.max_blocks_to_match),
                    cands,
                );
                let mut longest = 0usize;
                for ((c, m), cand) in cost.iter_mut().zip(&matched).zip(cands) {
                    let cached = (*m as usize * bs).min(tokens.len());
                    longest = longest.max(*m as usize);
                    *c = load(cand) + w * (tokens.len() - cached) as f64 + 1.0;
                }
                if total > 0 {
                    note = ScoreNote::with_match_ratio(longest as f64 / total as f64);
                }
            }
            None => {
                let own = w * estimated_tokens(req.prompt.len()) as f64;
                for (c, cand) in cost.iter_mut().zip(cands) {
                    *c = load(cand) + own + 1.0;
                }
            }
        }
        let min = cost.iter().copied().fold(f64::INFINITY, f64::min);
        for (o, c) in out.iter_mut().zip(&cost) {
            *o = 100.0 * min / c;
        }
        note
    }

    /// The chained token-block hashes of the prompt (nothing without token ids).
    fn completion_blocks(&self, req: &Request<'_>) -> Option<Arc<[u64]>> {
        token_blocks(
            req,
            self.args.block_size_to_hash,
            self.args.max_blocks_to_match,
        )
    }

    /// Records the prompt's full blocks as provisionally held by `chosen` and as pinned
    /// there until the request ends.
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
