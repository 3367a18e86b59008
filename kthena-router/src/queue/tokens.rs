//! Per (user, model) usage over a sliding window (Go Kthena `datastore/token_tracker.go`):
//! one bucket per second of weighted tokens `input × FAIRNESS_INPUT_TOKEN_WEIGHT + output ×
//! FAIRNESS_OUTPUT_TOKEN_WEIGHT` and requests, summed over the last `FAIRNESS_WINDOW_SIZE`.
//!
//! The user ids come from clients (the body's `user` without authentication), so what is
//! kept of them is bounded: an id longer than [`MAX_USER_KEY_BYTES`] is tracked by its
//! SHA-256 digest, and a (user, model) pair whose usage has left the window is dropped at
//! the next sweep (at most one a second, on [`TokenTracker::record`]), whether or not that
//! user comes back. Go's tracker keeps every pair it has seen.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::lock;

/// User ids up to this many bytes are kept as they are; longer ones by their digest.
pub(crate) const MAX_USER_KEY_BYTES: usize = 128;

/// A user as the tracker keys it: the id, or the first 16 bytes of its SHA-256 when the id
/// is longer than [`MAX_USER_KEY_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum UserKey {
    Id(Box<str>),
    Digest([u8; 16]),
}

impl UserKey {
    fn of(user: &str) -> Self {
        if user.len() <= MAX_USER_KEY_BYTES {
            return Self::Id(user.into());
        }
        let digest = Sha256::digest(user.as_bytes());
        let mut d = [0u8; 16];
        d.copy_from_slice(&digest[..16]);
        Self::Digest(d)
    }
}

/// The tracked pairs and the second of the last sweep.
#[derive(Debug, Default)]
struct Usage {
    pairs: HashMap<(UserKey, Box<str>), VecDeque<Bucket>>,
    swept: u64,
}

/// One second of one user's usage of one model.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Seconds since the tracker's start.
    second: u64,
    tokens: f64,
    requests: u64,
}

/// The usage tracker (see the module docs).
#[derive(Debug)]
pub(crate) struct TokenTracker {
    window: Duration,
    input_weight: f64,
    output_weight: f64,
    start: Instant,
    usage: Mutex<Usage>,
}

impl TokenTracker {
    /// A tracker over `window` with the token weights (tokens per token, ≥ 0).
    pub(crate) fn new(window: Duration, input_weight: f64, output_weight: f64) -> Self {
        Self {
            window,
            input_weight,
            output_weight,
            start: Instant::now(),
            usage: Mutex::new(Usage::default()),
        }
    }

    fn second(&self) -> u64 {
        self.start.elapsed().as_secs()
    }

    fn trim(&self, q: &mut VecDeque<Bucket>, now: u64) {
        let w = self.window.as_secs().max(1);
        while q.front().is_some_and(|b| b.second + w <= now) {
            q.pop_front();
        }
    }

    /// Drops every pair with no usage left in the window.
    fn sweep(&self, pairs: &mut HashMap<(UserKey, Box<str>), VecDeque<Bucket>>, now: u64) {
        pairs.retain(|_, q| {
            self.trim(q, now);
            !q.is_empty()
        });
    }

    /// `(pairs tracked, bytes of user ids kept)`, for tests of the bounds.
    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        let g = lock(&self.usage);
        let bytes = g
            .pairs
            .keys()
            .map(|(u, _)| match u {
                UserKey::Id(id) => id.len(),
                UserKey::Digest(d) => d.len(),
            })
            .sum();
        (g.pairs.len(), bytes)
    }

    /// Charges one request of `input` and `output` tokens to `user` for `model`.
    pub(crate) fn record(&self, user: &str, model: &str, input: f64, output: f64) {
        let now = self.second();
        let tokens = input * self.input_weight + output * self.output_weight;
        let mut g = lock(&self.usage);
        if g.swept != now {
            g.swept = now;
            self.sweep(&mut g.pairs, now);
        }
        let q = g
            .pairs
            .entry((UserKey::of(user), model.into()))
            .or_default();
        self.trim(q, now);
        match q.back_mut() {
            Some(b) if b.second == now => {
                b.tokens += tokens;
                b.requests += 1;
            }
            _ => q.push_back(Bucket {
                second: now,
                tokens,
                requests: 1,
            }),
        }
    }

    /// `(weighted tokens, requests)` of `user` for `model` over the window.
    pub(crate) fn usage(&self, user: &str, model: &str) -> (f64, u64) {
        let now = self.second();
        let mut g = lock(&self.usage);
        let key = (UserKey::of(user), Box::<str>::from(model));
        let Some(q) = g.pairs.get_mut(&key) else {
            return (0.0, 0);
        };
        self.trim(q, now);
        if q.is_empty() {
            g.pairs.remove(&key);
            return (0.0, 0);
        }
        q.iter()
            .fold((0.0, 0), |(t, r), b| (t + b.tokens, r + b.requests))
    }

    /// The fairness priority of `user` for `model`, lower served first:
    /// `token_weight × tokens + request_num_weight × requests` (Go Kthena
    /// `pkg/kthena-router/datastore/fairness_queue.go`).
    pub(crate) fn priority(
        &self,
        user: &str,
        model: &str,
        token_weight: f64,
        request_num_weight: f64,
    ) -> f64 {
        let (tokens, requests) = self.usage(user, model);
        #[allow(
            clippy::cast_precision_loss,
            reason = "request counts are far below 2^52"
        )]
        let requests = requests as f64;
        token_weight * tokens + request_num_weight * requests
    }
}

#[cfg(test)]
mod tests;
