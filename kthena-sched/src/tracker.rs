//! The host-side load counters of one endpoint and the protocol that keeps them right:
//! add at send, subtract the prefill part at the first response byte, settle the rest when
//! the request ends ([`LoadTracker`], [`LoadGuard`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::types::Metrics;

/// The three load counters a host keeps per endpoint, read into [`Metrics::in_flight`],
/// [`Metrics::awaiting_first_token`] and [`Metrics::pending_prefill_tokens`].
///
/// Share one tracker per endpoint (`Arc<LoadTracker>`) between the request path and the
/// code that builds [`Candidate`](crate::Candidate)s. Every request sent to the endpoint
/// takes a [`LoadGuard`] from [`begin`](Self::begin); the guard is the only way the counts
/// move, so they cannot drift:
///
/// | event | `in_flight` | `awaiting_first_token` | `pending_prefill_tokens` |
/// |---|---|---|---|
/// | [`begin(p)`](Self::begin) (the request is sent) | +1 | +1 | +p |
/// | [`LoadGuard::first_byte`] (first response byte, once) | | −1 | −p |
/// | guard dropped (the request ended, failed or was cancelled) | −1 | −1 if no first byte | −p if no first byte |
///
/// `p` is the prompt tokens the endpoint still has to prefill, in tokens: the
/// [`Completion::prefill_tokens`](crate::Completion::prefill_tokens) that
/// [`Scheduler::on_scheduled`](crate::Scheduler::on_scheduled) returns.
///
/// ```
/// use std::sync::Arc;
/// use kthena_sched::{LoadTracker, Metrics};
///
/// let load = Arc::new(LoadTracker::new());
/// let mut guard = load.begin(300); // sent, 300 prompt tokens to prefill
/// assert_eq!((load.in_flight(), load.awaiting_first_token(), load.pending_prefill_tokens()), (1, 1, 300));
/// guard.first_byte(); // the first token arrived: the prefill is over
/// assert_eq!((load.in_flight(), load.awaiting_first_token(), load.pending_prefill_tokens()), (1, 0, 0));
/// drop(guard); // the stream ended
/// assert_eq!(load.in_flight(), 0);
///
/// let mut m = Metrics::default();
/// load.fill(&mut m);
/// assert_eq!(m, Metrics::default());
/// ```
#[derive(Debug, Default)]
pub struct LoadTracker {
    in_flight: AtomicU32,
    awaiting_first_token: AtomicU32,
    pending_prefill_tokens: AtomicU64,
}

// === impl LoadTracker ===

impl LoadTracker {
    /// A tracker with every count at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one more request sent to the endpoint, with `prefill_tokens` prompt tokens
    /// (tokens) to prefill there. The returned guard gives the counts back.
    #[must_use = "dropping the guard at once ends the request"]
    pub fn begin(self: &Arc<Self>, prefill_tokens: u64) -> LoadGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.awaiting_first_token.fetch_add(1, Ordering::Relaxed);
        self.pending_prefill_tokens
            .fetch_add(prefill_tokens, Ordering::Relaxed);
        LoadGuard {
            tracker: Arc::clone(self),
            prefill_tokens: Some(prefill_tokens),
            on_release: Vec::new(),
        }
    }

    /// Requests sent and not yet ended.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Requests sent that have not returned their first response byte.
    pub fn awaiting_first_token(&self) -> u32 {
        self.awaiting_first_token.load(Ordering::Relaxed)
    }

    /// Prompt tokens those requests still have to prefill, in tokens.
    pub fn pending_prefill_tokens(&self) -> u64 {
        self.pending_prefill_tokens.load(Ordering::Relaxed)
    }

    /// Writes the three counts into `metrics` (`in_flight`, `awaiting_first_token`,
    /// `pending_prefill_tokens`); the other fields are left as they are.
    pub fn fill(&self, metrics: &mut Metrics) {
        metrics.in_flight = self.in_flight();
        metrics.awaiting_first_token = self.awaiting_first_token();
        metrics.pending_prefill_tokens = self.pending_prefill_tokens();
    }

    fn prefill_done(&self, tokens: u64) {
        self.awaiting_first_token.fetch_sub(1, Ordering::Relaxed);
        self.pending_prefill_tokens
            .fetch_sub(tokens, Ordering::Relaxed);
    }
}

/// One request's share of a [`LoadTracker`]: taken at send, [`first_byte`](Self::first_byte)
/// at the first response byte, dropped when the request ends (settling whatever is left).
#[must_use = "dropping the guard ends the request"]
pub struct LoadGuard {
    tracker: Arc<LoadTracker>,
    /// `Some` until the first response byte.
    prefill_tokens: Option<u64>,
    /// Called once each, after the counts are given back.
    on_release: Vec<Box<dyn FnOnce() + Send + Sync>>,
}

impl fmt::Debug for LoadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadGuard")
            .field("prefill_tokens", &self.prefill_tokens)
            .field("on_release", &self.on_release.len())
            .finish_non_exhaustive()
    }
}

impl LoadGuard {
    /// The first response byte arrived: the request no longer awaits its first token and its
    /// prefill tokens leave `pending_prefill_tokens`. Later calls do nothing.
    pub fn first_byte(&mut self) {
        if let Some(t) = self.prefill_tokens.take() {
            self.tracker.prefill_done(t);
        }
    }

    /// Whether [`first_byte`](Self::first_byte) was called.
    pub fn has_first_byte(&self) -> bool {
        self.prefill_tokens.is_none()
    }

    /// The tracker this guard counts in.
    pub fn tracker(&self) -> &Arc<LoadTracker> {
        &self.tracker
    }

    /// Runs `f` when the guard drops, after the counts are given back: for hosts that also
    /// count the request elsewhere (kthena-router gives its Redis-shared in-flight slot back
    /// here). Hooks run in the order they were added.
    pub fn on_release(&mut self, f: impl FnOnce() + Send + Sync + 'static) {
        self.on_release.push(Box::new(f));
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.first_byte();
        self.tracker.in_flight.fetch_sub(1, Ordering::Relaxed);
        for f in self.on_release.drain(..) {
            f();
        }
    }
}

#[cfg(test)]
mod tests;
