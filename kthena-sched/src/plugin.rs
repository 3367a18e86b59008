//! The plugin traits: [`FilterPlugin`] and [`ScorePlugin`].

use std::fmt;
use std::sync::Arc;

use crate::decision::{PluginStats, ScoreNote};
use crate::request::{Completion, Request};
use crate::types::{Candidate, EndpointId};

/// A filter plugin: removes candidates that cannot serve a request.
///
/// Called once per request, in configuration order, with the candidates and an index-aligned
/// mask `keep` (`keep.len() == cands.len()`); `keep[i]` is already `false` for candidates an
/// earlier filter removed, and a filter that compares candidates (like `load-imbalance`)
/// should only look at the kept ones. The plugin clears `keep[i]` for candidates it rejects. Setting an entry to `true` has no effect: the
/// framework ANDs the mask with the previous one, so a filter can never re-admit a candidate.
/// If a filter rejects every candidate, scheduling fails with [`Error::AllFiltered`](crate::Error::AllFiltered).
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
/// non-finite values (NaN becomes 0) and counts them in [`Scheduler::score_violations`](crate::Scheduler::score_violations).
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

    /// The block hashes this plugin keys `req`'s state by, kept in the owned [`Completion`]
    /// that [`Scheduler::on_scheduled`](crate::Scheduler::on_scheduled) returns, so that
    /// [`on_completed`](Self::on_completed) finds the request's state without the prompt
    /// (`prefix-cache`: its prompt-byte blocks; `kvcache-aware` and `least-prefill`: the
    /// token blocks). Default: none.
    fn completion_blocks(&self, _req: &Request<'_>) -> Option<Arc<[u64]>> {
        None
    }

    /// A scheduled request ended; `success` says whether the upstream answered
    /// successfully. Default: nothing.
    fn on_completed(&self, _done: &Completion, _success: bool) {}

    /// The host removed an endpoint; forget any state about it. Default: nothing.
    fn on_endpoint_removed(&self, _id: &EndpointId) {}

    /// Counters of the plugin's state, for the host's metrics. Default: none.
    fn stats(&self) -> PluginStats {
        PluginStats::default()
    }
}
