//! Per (user, model) usage over a sliding window (Go Kthena `datastore/token_tracker.go`):
//! one bucket per second of weighted tokens `input × FAIRNESS_INPUT_TOKEN_WEIGHT + output ×
//! FAIRNESS_OUTPUT_TOKEN_WEIGHT` and requests, summed over the last `FAIRNESS_WINDOW_SIZE`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::lock;

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
    usage: Mutex<HashMap<(String, String), VecDeque<Bucket>>>,
}

impl TokenTracker {
    /// A tracker over `window` with the token weights (tokens per token, ≥ 0).
    pub(crate) fn new(window: Duration, input_weight: f64, output_weight: f64) -> Self {
        Self {
            window,
            input_weight,
            output_weight,
            start: Instant::now(),
            usage: Mutex::new(HashMap::new()),
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

    /// Charges one request of `input` and `output` tokens to `user` for `model`.
    pub(crate) fn record(&self, user: &str, model: &str, input: f64, output: f64) {
        let now = self.second();
        let tokens = input * self.input_weight + output * self.output_weight;
        let mut g = lock(&self.usage);
        let q = g.entry((user.to_owned(), model.to_owned())).or_default();
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
        let key = (user.to_owned(), model.to_owned());
        let Some(q) = g.get_mut(&key) else {
            return (0.0, 0);
        };
        self.trim(q, now);
        if q.is_empty() {
            g.remove(&key);
            return (0.0, 0);
        }
        q.iter()
            .fold((0.0, 0), |(t, r), b| (t + b.tokens, r + b.requests))
    }

    /// The fairness priority of `user` for `model`, lower served first:
    /// `token_weight × tokens + request_num_weight × requests` (spec §2.10).
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
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn weighs_tokens_and_forgets_them_after_the_window() {
        let t = TokenTracker::new(Duration::from_secs(60), 1.0, 2.0);
        t.record("u", "m", 10.0, 5.0);
        tokio::time::advance(Duration::from_secs(30)).await;
        t.record("u", "m", 1.0, 0.0);
        t.record("u", "other", 100.0, 0.0);
        assert_eq!(t.usage("u", "m"), (21.0, 2));
        assert!((t.priority("u", "m", 0.5, 10.0) - 30.5).abs() < 1e-9);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(t.usage("u", "m"), (1.0, 1));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(t.usage("u", "m"), (0.0, 0));
        assert_eq!(t.usage("nobody", "m"), (0.0, 0));
    }
}
