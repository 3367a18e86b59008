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

/// The best value recorded over the last `window` (Go `RmqRecordSlidingWindow`): a monotonic
/// deque, so [`append`](Self::append) is amortised O(1) and [`best`](Self::best) O(1).
///
/// A zero-length window never answers (Go: `freshMilliseconds == 0` ⇒ not ok).
#[derive(Clone, Debug)]
pub struct RecordWindow {
    pool: VecDeque<(Duration, i32)>,
    window: Duration,
    best: Best,
}

impl RecordWindow {
    /// An empty window of length `window` keeping the `best` value.
    pub fn new(window: Duration, best: Best) -> Self {
        Self {
            pool: VecDeque::new(),
            window,
            best,
        }
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(at, _)) = self.pool.front() {
            if fresh(self.window, now, at) {
                break;
            }
            self.pool.pop_front();
        }
    }

    /// Records `value` at `now`.
    pub fn append(&mut self, now: Duration, value: i32) {
        self.expire(now);
        while let Some(&(_, back)) = self.pool.back() {
            if self.best.better(back, value) {
                break;
            }
            self.pool.pop_back();
        }
        self.pool.push_back((now, value));
    }

    /// The best value recorded within the window, `None` when the window is empty or has
    /// length zero.
    pub fn best(&mut self, now: Duration) -> Option<i32> {
        self.expire(now);
        if self.window.is_zero() {
            return None;
        }
        self.pool.front().map(|&(_, v)| v)
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
    pool: VecDeque<(Duration, i32)>,
    window: Duration,
    drifting: Option<(Duration, i32)>,
    best: Best,
}

impl LineChartWindow {
    /// An empty window of length `window` keeping the `best` value.
    pub fn new(window: Duration, best: Best) -> Self {
        Self {
            pool: VecDeque::new(),
            window,
            drifting: None,
            best,
        }
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(at, _)) = self.pool.front() {
            if fresh(self.window, now, at) {
                break;
            }
            self.pool.pop_front();
        }
        if let Some((at, _)) = self.drifting
            && !fresh(self.window * 2, now, at)
        {
            self.drifting = None;
        }
    }

    /// Makes `value` the drifting value from `now` on.
    pub fn append(&mut self, now: Duration, value: i32) {
        self.expire(now);
        if let Some((_, drift)) = self.drifting {
            while let Some(&(_, back)) = self.pool.back() {
                if self.best.better(back, drift) {
                    break;
                }
                self.pool.pop_back();
            }
            self.pool.push_back((now, drift));
        }
        self.drifting = Some((now, value));
    }

    /// The best of `current`, the drifting value and the pooled values within the window;
    /// `None` only for a zero-length window.
    pub fn best(&mut self, now: Duration, current: i32) -> Option<i32> {
        if self.window.is_zero() {
            return None;
        }
        self.expire(now);
        let mut value = current;
        if let Some((_, drift)) = self.drifting
            && self.best.better(drift, value)
        {
            value = drift;
        }
        if let Some(&(_, front)) = self.pool.front()
            && self.best.better(front, value)
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
