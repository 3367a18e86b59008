//! Sliding windows over time (Go `pkg/autoscaler/datastructure/sliding_window.go`).
//!
//! Every method takes `now`, a [`Duration`] since an epoch the caller chooses (the same epoch
//! for every call on one window). A sample taken at `t` is *fresh* at `now` while
//! `t + window >= now` (Go `isFresh`, millisecond arithmetic there, exact here).

use std::collections::VecDeque;
use std::time::Duration;

/// Whether a window keeps the largest or the smallest value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Best {
    /// The largest value wins (a "maximum" window).
    Max,
    /// The smallest value wins (a "minimum" window).
    Min,
}

impl Best {
    /// `me` strictly beats `other`.
    fn better(self, me: i32, other: i32) -> bool {
        match self {
            Self::Max => me > other,
            Self::Min => me < other,
        }
    }
}

fn fresh(window: Duration, now: Duration, at: Duration) -> bool {
    at + window >= now
}

/// The pool of both best-value windows: `(time, value)` pairs, oldest first, each beating
/// every later one (a monotonic deque), so the front is the best value still fresh.
#[derive(Clone, Debug)]
struct Monotonic {
    pool: VecDeque<(Duration, i32)>,
    window: Duration,
    best: Best,
}

impl Monotonic {
    fn new(window: Duration, best: Best) -> Self {
        Self {
            pool: VecDeque::new(),
            window,
            best,
        }
    }

    /// Drops the pairs that are no longer fresh at `now`.
    fn expire(&mut self, now: Duration) {
        while let Some(&(at, _)) = self.pool.front() {
            if fresh(self.window, now, at) {
                break;
            }
            self.pool.pop_front();
        }
    }

    /// Adds `value` stamped `at`, dropping the later pairs it is at least as good as.
    fn push(&mut self, at: Duration, value: i32) {
        while let Some(&(_, back)) = self.pool.back() {
            if self.best.better(back, value) {
                break;
            }
            self.pool.pop_back();
        }
        self.pool.push_back((at, value));
    }

    /// The best pooled value (call [`expire`](Self::expire) first).
    fn front(&self) -> Option<i32> {
        self.pool.front().map(|&(_, v)| v)
    }
}

/// The best value recorded over the last `window` (Go `RmqRecordSlidingWindow`): a monotonic
/// deque, so [`append`](Self::append) is amortised O(1) and [`best`](Self::best) O(1).
///
/// A zero-length window never answers (Go: `freshMilliseconds == 0` ⇒ not ok).
#[derive(Clone, Debug)]
pub struct RecordWindow(Monotonic);

impl RecordWindow {
    /// An empty window of length `window` keeping the `best` value.
    pub fn new(window: Duration, best: Best) -> Self {
        Self(Monotonic::new(window, best))
    }

    /// Records `value` at `now`.
    pub fn append(&mut self, now: Duration, value: i32) {
        self.0.expire(now);
        self.0.push(now, value);
    }

    /// The best value recorded within the window, `None` when the window is empty or has
    /// length zero.
    pub fn best(&mut self, now: Duration) -> Option<i32> {
        self.0.expire(now);
        if self.0.window.is_zero() {
            return None;
        }
        self.0.front()
    }
}

/// The best value of a step line over the last `window` (Go `RmqLineChartSlidingWindow`).
///
/// The last appended value is *drifting*: it holds from the time it was appended until the
/// next append (or for at most `2 × window`), so it counts as seen "now" as well. Each append
/// moves the previous drifting value into the pool, stamped with the time of the new append
/// (the time it stopped holding). [`best`](Self::best) compares the caller's current value,
/// the drifting value and the best pooled value. A zero-length window never answers.
#[derive(Clone, Debug)]
pub struct LineChartWindow {
    pool: Monotonic,
    drifting: Option<(Duration, i32)>,
}

impl LineChartWindow {
    /// An empty window of length `window` keeping the `best` value.
    pub fn new(window: Duration, best: Best) -> Self {
        Self {
            pool: Monotonic::new(window, best),
            drifting: None,
        }
    }

    fn expire(&mut self, now: Duration) {
        self.pool.expire(now);
        if let Some((at, _)) = self.drifting
            && !fresh(self.pool.window * 2, now, at)
        {
            self.drifting = None;
        }
    }

    /// Makes `value` the drifting value from `now` on.
    pub fn append(&mut self, now: Duration, value: i32) {
        self.expire(now);
        if let Some((_, drift)) = self.drifting {
            self.pool.push(now, drift);
        }
        self.drifting = Some((now, value));
    }

    /// The best of `current`, the drifting value and the pooled values within the window;
    /// `None` only for a zero-length window.
    pub fn best(&mut self, now: Duration, current: i32) -> Option<i32> {
        if self.pool.window.is_zero() {
            return None;
        }
        self.expire(now);
        let best = self.pool.best;
        let mut value = current;
        if let Some((_, drift)) = self.drifting
            && best.better(drift, value)
        {
            value = drift;
        }
        if let Some(front) = self.pool.front()
            && best.better(front, value)
        {
            value = front;
        }
        Some(value)
    }
}

/// Snapshots kept for `expire`, of which the newest one at least `fresh` old is served (Go
/// `SnapshotSlidingWindow`, used for histogram deltas with 60 s / 300 s).
#[derive(Clone, Debug)]
pub struct SnapshotWindow<T> {
    pool: VecDeque<(Duration, T)>,
    fresh: Duration,
    expire: Duration,
}

impl<T> SnapshotWindow<T> {
    /// An empty window serving snapshots at least `fresh` old and dropping those older than
    /// `expire`.
    pub fn new(fresh: Duration, expire: Duration) -> Self {
        Self {
            pool: VecDeque::new(),
            fresh,
            expire,
        }
    }

    fn expire(&mut self, now: Duration) {
        while let Some((at, _)) = self.pool.front() {
            if fresh(self.expire, now, *at) {
                break;
            }
            self.pool.pop_front();
        }
        // Keep exactly one snapshot that is no longer fresh: the newest such one.
        while self.pool.len() > 1 {
            if fresh(self.fresh, now, self.pool[1].0) {
                break;
            }
            self.pool.pop_front();
        }
    }

    /// Stores `value` taken at `now`.
    pub fn append(&mut self, now: Duration, value: T) {
        self.expire(now);
        self.pool.push_back((now, value));
    }

    /// The newest snapshot at least `fresh` old (and younger than `expire`), with its time.
    pub fn last_unfresh(&mut self, now: Duration) -> Option<(Duration, &T)> {
        if self.fresh.is_zero() {
            return None;
        }
        self.expire(now);
        let (at, value) = self.pool.front()?;
        if fresh(self.fresh, now, *at) {
            return None;
        }
        Some((*at, value))
    }

    /// Forgets every snapshot.
    pub fn clear(&mut self) {
        self.pool.clear();
    }
}

#[cfg(test)]
mod tests;
