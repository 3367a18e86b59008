//! The per-router token bucket (Go Kthena's `LocalLimiter`, `golang.org/x/time/rate`
//! semantics): capacity `N`, refilled continuously at `N / unit` tokens per second, starting
//! full.

use tokio::time::Instant;

/// A token bucket; times are tokio instants (paused time in tests).
#[derive(Debug)]
pub(crate) struct LocalBucket {
    /// Refill rate, tokens per second.
    rate: f64,
    /// Capacity (the limit per unit), tokens.
    burst: f64,
    /// Tokens now (negative after an output charge larger than what was left).
    tokens: f64,
    last: Instant,
}

impl LocalBucket {
    /// A full bucket of `limit` tokens refilled at `limit / unit_secs` per second.
    pub(crate) fn new(limit: u32, unit_secs: u64, now: Instant) -> Self {
        Self {
            rate: f64::from(limit) / unit_secs as f64,
            burst: f64::from(limit),
            tokens: f64::from(limit),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes `n` tokens when that many are there (Go's `AllowN`); returns whether it did and
    /// the tokens left.
    pub(crate) fn allow_n(&mut self, now: Instant, n: f64) -> (bool, f64) {
        self.refill(now);
        if self.tokens - n < 0.0 {
            return (false, self.tokens);
        }
        self.tokens -= n;
        (true, self.tokens)
    }

    /// Takes `delta` tokens unconditionally (a refund when negative), never above capacity;
    /// the bucket may go below zero (Go's `ReconcileN`). Returns the tokens left.
    pub(crate) fn reconcile_n(&mut self, now: Instant, delta: f64) -> f64 {
        self.refill(now);
        self.tokens = (self.tokens - delta).min(self.burst);
        self.tokens
    }

    /// The tokens there now.
    #[cfg(test)]
    pub(crate) fn tokens(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.tokens
    }
}

#[cfg(test)]
mod tests;
