//! The [`Scheduler`] itself: filtering, scoring, ranking and the lifecycle hooks (Go Kthena
//! `pkg/kthena-router/scheduler/scheduler_impl.go`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

/// A clock for plugin timings (see [`SchedulerBuilder::clock`](crate::SchedulerBuilder::clock)).
pub type Clock = fn() -> Instant;

use crate::decision::{
    Decision, PdDecision, PdPair, PluginKind, PluginStats, PluginTiming, Ranked,
};
use crate::kv_index::{KvIndex, KvQuery};
use crate::plugin::{FilterPlugin, ScorePlugin};
use crate::prefetch::Prefetch;
use crate::registry::Rebuild;
use crate::request::{Completion, Request};
use crate::types::{Candidate, EndpointId, PdRole};
use crate::{Error, FastMap, Result};

/// Default number of ranked endpoints in a [`Decision`]: the best plus 4 fallbacks
/// (Go Kthena `topN = 5`).
pub const DEFAULT_TOP_N: usize = 5;

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
    pub(crate) filters: Vec<Box<dyn FilterPlugin>>,
    pub(crate) scores: Vec<(Box<dyn ScorePlugin>, f64)>,
    pub(crate) top_n: usize,
    pub(crate) kv_index: Option<Arc<dyn KvIndex>>,
    pub(crate) clock: Option<Clock>,
    pub(crate) violations: AtomicU64,
    /// Rankings whose best total was shared by several candidates, per model (rotates the tie).
    pub(crate) ties: TieTurns,
    /// What [`Scheduler::rebuild`] carries over.
    pub(crate) rebuild: Rebuild,
}

/// Most models whose tie turns are remembered; past it the turns start over.
const MAX_TIE_MODELS: usize = 4096;

/// Which ranking a turn is for: aggregated and decode rankings, or prefill rankings.
#[derive(Debug, Clone, Copy)]
enum Lane {
    Main = 0,
    Prefill = 1,
}

/// Turn counters of ties for the best total, per model and [`Lane`].
#[derive(Debug, Default)]
pub(crate) struct TieTurns(RwLock<FastMap<Box<str>, [AtomicU64; 2]>>);

impl TieTurns {
    /// The turn of this tie for `model` (0 for its first tie), counting it.
    fn next(&self, model: &str, lane: Lane) -> u64 {
        let lane = lane as usize;
        if let Some(t) = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
        {
            return t[lane].fetch_add(1, Ordering::Relaxed);
        }
        let mut g = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if g.len() >= MAX_TIE_MODELS && !g.contains_key(model) {
            g.clear();
        }
        g.entry(model.into()).or_default()[lane].fetch_add(1, Ordering::Relaxed)
    }
}

struct Ranking {
    ranked: Vec<Ranked>,
    match_ratios: Vec<(&'static str, f64)>,
    timings: Vec<PluginTiming>,
}

// === impl Scheduler ===

impl Scheduler {
    /// The KV-cache index used by `kvcache-aware` and `least-prefill` (`None` when neither is
    /// enabled).
    /// Feed it the engines' KV events with [`KvIndex::apply`].
    pub fn kv_index(&self) -> Option<&Arc<dyn KvIndex>> {
        self.kv_index.as_ref()
    }

    /// The prompt tokens `cand` would still have to prefill for `req`, in tokens: the prompt's
    /// length minus the contiguous prefix the KV index says `cand` holds (read from
    /// [`Request::prefetch`] when the host fetched the lookups ahead). Without a KV index or
    /// token ids: `ceil(prompt bytes / 4)` (Go Kthena's input-token estimate).
    /// [`on_scheduled`](Self::on_scheduled) returns it as
    /// [`Completion::prefill_tokens`], for the endpoint's [`LoadTracker`](crate::LoadTracker).
    pub fn prefill_tokens(&self, req: &Request<'_>, cand: &Candidate) -> u64 {
        let Some(tokens) = req.token_ids.filter(|t| !t.is_empty()) else {
            return crate::request::estimated_tokens(req.prompt.len()) as u64;
        };
        let Some(index) = &self.kv_index else {
            return tokens.len() as u64;
        };
        let bs = index.block_size().filter(|b| *b > 0);
        if let Some(p) = req.prefetch {
            let lookup = match bs {
                Some(bs) => p.lookup(req.model, bs),
                None => p.longest(req.model),
            };
            if let Some(l) = lookup {
                let cached = (l.matched(&cand.id) as usize * l.block_size()).min(tokens.len());
                return (tokens.len() - cached) as u64;
            }
        }
        let Some(bs) = bs else {
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

    /// The KV-index lookups `req` will make, owned, for the host to answer before
    /// [`schedule`](Self::schedule) when the index is remote ([`KvIndex::is_remote`]): the
    /// host fetches them without blocking (on its own runtime), answers each
    /// [`KvLookup`](crate::KvLookup), and schedules
    /// [`req.with_prefetch(&prefetch)`](Request::with_prefetch). `None` when there is
    /// nothing to fetch ahead: no plugin reads a KV index, the request has no token ids, or
    /// the index is in-process (scheduling reads it directly). See [`Prefetch`].
    pub fn prepare(&self, req: &Request<'_>) -> Option<Prefetch> {
        let tokens = req.token_ids.filter(|t| !t.is_empty())?;
        let index = self.kv_index.as_ref()?;
        if !index.is_remote() || self.rebuild.kv_lookups.is_empty() {
            return None;
        }
        Some(Prefetch::new(req.model, tokens, &self.rebuild.kv_lookups))
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

    /// Ranks `cands` for `req` (aggregated serving, Go's `Schedule`): runs every filter,
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
        let r = self.rank(req, cands, &idx, self.top_n, Lane::Main)?;
        Ok(Decision {
            ranked: r.ranked,
            match_ratios: r.match_ratios,
            plugin_timings: r.timings,
        })
    }

    /// Pairs decode and prefill endpoints (prefill/decode disaggregation in Go's `Schedule`): ranks
    /// the decode endpoints (top `top_n`), then for each picks the best prefill endpoint with the
    /// same group value after filters and scores. Candidates without a
    /// [`PdMember`](crate::PdMember) are ignored.
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
        let decodes = self.rank(req, cands, &decode, self.top_n, Lane::Main)?;
        let mut pairs = Vec::with_capacity(decodes.ranked.len());
        for d in decodes.ranked {
            let group = cands[d.index].pd.as_ref().map(|p| p.group.as_str());
            let prefill = role_indices(cands, PdRole::Prefill, group);
            if prefill.is_empty() {
                continue;
            }
            match self.rank(req, cands, &prefill, 1, Lane::Prefill) {
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
    ///
    /// Returns the owned [`Completion`] of the request: its
    /// [`prefill_tokens`](Completion::prefill_tokens) (computed before the plugins record
    /// the request) for the endpoint's [`LoadTracker`](crate::LoadTracker), and what
    /// [`on_completed`](Self::on_completed) needs later. Nothing borrowed from `req` is kept,
    /// so the host may drop the request body now.
    pub fn on_scheduled(&self, req: &Request<'_>, chosen: &Candidate) -> Completion {
        let mut done = Completion::new(req, chosen.id.clone());
        done.prefill_tokens = self.prefill_tokens(req, chosen);
        for (p, _) in &self.scores {
            if let Some(b) = p.completion_blocks(req) {
                done.push_blocks(p.name(), b);
            }
            p.on_scheduled(req, chosen);
        }
        done
    }

    /// Tells the plugins that a scheduled request ended; `success`: whether the upstream
    /// answered successfully. `done` is what [`on_scheduled`](Self::on_scheduled) returned
    /// (possibly by a scheduler this one was [reconfigured](Self::reconfigure) from).
    pub fn on_completed(&self, done: &Completion, success: bool) {
        for (p, _) in &self.scores {
            p.on_completed(done, success);
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
        lane: Lane,
    ) -> Result<Ranking> {
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.rank_with(&mut scratch, req, all, idx, (limit, lane)),
            // Re-entered from a plugin: use fresh buffers.
            Err(_) => self.rank_with(&mut Scratch::default(), req, all, idx, (limit, lane)),
        })
    }

    fn rank_with(
        &self,
        s: &mut Scratch,
        req: &Request<'_>,
        all: &[Candidate],
        idx: &[usize],
        (limit, lane): (usize, Lane),
    ) -> Result<Ranking> {
        s.idx.clear();
        s.idx.extend_from_slice(idx);
        let mut refs: Vec<&Candidate> = idx.iter().map(|&i| &all[i]).collect();
        let mut timings = Vec::new();
        if !self.filters.is_empty() {
            self.apply_filters(s, req, all, &mut refs, &mut timings)?;
        }
        let match_ratios = self.sum_scores(s, req, &refs, &mut timings);
        self.order(s, req, &refs, limit, lane);
        let ranked = s
            .order
            .iter()
            .map(|&k| Ranked {
                index: s.idx[k],
                id: refs[k].id.clone(),
                score: s.totals[k],
            })
            .collect();
        Ok(Ranking {
            ranked,
            match_ratios,
            timings,
        })
    }

    /// Runs every filter over `refs` (the candidates at `s.idx`), then keeps in `s.idx` and
    /// `refs` the candidates that all filters kept.
    ///
    /// # Errors
    /// [`Error::AllFiltered`] naming the first filter after which no candidate is left.
    fn apply_filters<'a>(
        &self,
        s: &mut Scratch,
        req: &Request<'_>,
        all: &'a [Candidate],
        refs: &mut Vec<&'a Candidate>,
        timings: &mut Vec<PluginTiming>,
    ) -> Result<()> {
        s.keep.clear();
        s.keep.resize(refs.len(), true);
        for f in &self.filters {
            s.tmp.clear();
            s.tmp.extend_from_slice(&s.keep);
            let t0 = self.clock.map(|c| c());
            f.filter(req, refs, &mut s.tmp);
            self.time(timings, f.name(), PluginKind::Filter, t0);
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
        Ok(())
    }

    /// Writes into `s.totals` each candidate's weighted sum of scores, clamping (and counting
    /// as violations) scores that are not finite or outside 0..=100. Returns the match ratios
    /// the scorers reported.
    fn sum_scores(
        &self,
        s: &mut Scratch,
        req: &Request<'_>,
        refs: &[&Candidate],
        timings: &mut Vec<PluginTiming>,
    ) -> Vec<(&'static str, f64)> {
        let n = refs.len();
        s.totals.clear();
        s.totals.resize(n, 0.0);
        let mut match_ratios = Vec::new();
        for (p, w) in &self.scores {
            s.scores.clear();
            s.scores.resize(n, 0.0);
            let t0 = self.clock.map(|c| c());
            let note = p.score(req, refs, &mut s.scores);
            self.time(timings, p.name(), PluginKind::Score, t0);
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
        match_ratios
    }

    /// Writes into `s.order` the best `limit` candidates by `s.totals` (highest first, ties by
    /// id), then rotates those tied for the best total by the model's turn. When more
    /// candidates are tied for the best total than `limit`, the turn rotates over all of
    /// them (in id order) before the list is cut, so every tied candidate gets its turn.
    fn order(
        &self,
        s: &mut Scratch,
        req: &Request<'_>,
        refs: &[&Candidate],
        limit: usize,
        lane: Lane,
    ) {
        let n = refs.len();
        s.order.clear();
        s.order.extend(0..n);
        let totals = &s.totals;
        let cmp = |a: &usize, b: &usize| {
            totals[*b]
                .total_cmp(&totals[*a])
                .then_with(|| refs[*a].id.cmp(&refs[*b].id))
        };
        let limit = limit.min(n);
        let best = totals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let tied_all = totals.iter().filter(|t| **t == best).count();
        if tied_all > limit {
            s.order.retain(|&k| totals[k] == best);
            s.order
                .sort_unstable_by(|a, b| refs[*a].id.cmp(&refs[*b].id));
            let turn = self.ties.next(req.model, lane);
            let shift = usize::try_from(turn % tied_all as u64).unwrap_or(0);
            s.order.rotate_left(shift);
            s.order.truncate(limit);
            return;
        }
        if limit < n {
            s.order.select_nth_unstable_by(limit - 1, cmp);
            s.order.truncate(limit);
        }
        s.order.sort_unstable_by(cmp);
        // Candidates tied for the best total take turns, per model: the first such ranking
        // of a model keeps id order, each later one starts one further. Always picking the smallest id would
        // send every request to one endpoint while the scores cannot tell them apart
        // (`least-latency` before any endpoint has latency data; Go's map order spreads them).
        let tied = s
            .order
            .iter()
            .take_while(|&&k| totals[k] == totals[s.order[0]])
            .count();
        if tied > 1 {
            let turn = self.ties.next(req.model, lane);
            let shift = usize::try_from(turn % tied as u64).unwrap_or(0);
            s.order[..tied].rotate_left(shift);
        }
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
