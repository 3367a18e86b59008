//! Histogram quantiles over the delta between two cumulative snapshots (Go
//! `pkg/autoscaler/histogram/histogram.go`, `QuantileInDiff`), and the per-pod snapshot
//! history the metric collector keeps (Go `metric_collector.go`: snapshots kept 300 s, the
//! delta taken against the newest one at least 60 s old).

use std::collections::HashMap;
use std::time::Duration;

use crate::window::SnapshotWindow;
use crate::{Error, Result};

/// One cumulative Prometheus histogram: `count` observations, buckets as
/// `(upper bound "le", cumulative count)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Total observations (`_count`).
    pub count: u64,
    /// Sum of observations (`_sum`), in the metric's unit.
    pub sum: f64,
    /// `(le, cumulative count)`, sorted by `le` ascending by [`Histogram::new`]; the last
    /// bound is usually `+Inf`.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// A histogram from its samples; sorts the buckets by upper bound.
    pub fn new(count: u64, sum: f64, mut buckets: Vec<(f64, u64)>) -> Self {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self {
            count,
            sum,
            buckets,
        }
    }
}

/// The `percentile` (1..=100) of the observations made between `past` and `now`, by linear
/// interpolation inside the bucket holding rank `ceil(N × percentile / 100)` where
/// `N = now.count − past.count`:
/// `high − (highRank − rank) × (high − low) / countInBucket`. A `+Inf` upper bound counts as
/// `2 × low`. `N = 0` gives `0`. `past = None` uses `now` as it is (the cumulative histogram).
///
/// # Errors
/// [`Error::Histogram`] when the percentile is outside 1..=100, the count went down (a
/// restarted engine), the bucket layouts differ, or the bucket counts decrease.
pub fn quantile_in_diff(percentile: u32, now: &Histogram, past: Option<&Histogram>) -> Result<f64> {
    if !(1..=100).contains(&percentile) {
        return Err(Error::Histogram("percentile outside 1..=100"));
    }
    let past_count = past.map_or(0, |p| p.count);
    let Some(total) = now.count.checked_sub(past_count) else {
        return Err(Error::Histogram("count went down"));
    };
    if total == 0 {
        return Ok(0.0);
    }
    // Go: an empty past bucket list stands for "no past".
    let past = past.filter(|p| !p.buckets.is_empty());
    if let Some(p) = past
        && p.buckets.len() != now.buckets.len()
    {
        return Err(Error::Histogram("bucket layouts differ"));
    }
    let molecular = u128::from(total) * u128::from(percentile);
    let rank = molecular.div_ceil(100);
    let mut low = 0.0_f64;
    let mut last_high_rank: i128 = 0;
    for (i, &(le, cumulative)) in now.buckets.iter().enumerate() {
        let mut high_rank = i128::from(cumulative);
        if let Some(p) = past {
            high_rank -= i128::from(p.buckets[i].1);
        }
        if high_rank < last_high_rank {
            return Err(Error::Histogram("bucket counts decrease"));
        }
        let in_bucket = high_rank - last_high_rank;
        let high = if le == f64::INFINITY { low * 2.0 } else { le };
        let rank = rank as i128;
        if in_bucket > 0 && rank <= high_rank {
            return Ok(high - (high_rank - rank) as f64 * (high - low) / in_bucket as f64);
        }
        low = high;
        last_high_rank = high_rank;
    }
    Err(Error::Histogram("percentile not found in the buckets"))
}

/// Snapshot freshness of [`PodHistograms`]: the delta is taken against the newest snapshot at
/// least this old (Go: 60 s).
pub const HISTOGRAM_DELTA_WINDOW: Duration = Duration::from_secs(60);
/// Snapshots older than this are dropped (Go: 300 s).
pub const HISTOGRAM_RETENTION: Duration = Duration::from_secs(300);

#[derive(Debug)]
struct PodHistory {
    started_at: Option<Duration>,
    window: SnapshotWindow<Histogram>,
}

/// Per-pod histogram snapshots turning cumulative histograms into P95 values over the last
/// minute or so (Go metric collector, histogram families).
///
/// Keys are whatever identifies a pod and a family to the caller (e.g. `"ns/pod/family"`).
#[derive(Debug, Default)]
pub struct PodHistograms {
    pods: HashMap<String, PodHistory>,
}

impl PodHistograms {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// The P95 of `now_value` (scraped at `now` from the pod `key`, whose container started at
    /// `started_at`) over the delta against the newest snapshot at least
    /// [`HISTOGRAM_DELTA_WINDOW`] old; against nothing (the cumulative histogram) when there is
    /// no such snapshot or the pod's start time changed. Stores `now_value` afterwards.
    ///
    /// # Errors
    /// As [`quantile_in_diff`]; the snapshot is stored anyway so the next round can recover.
    pub fn p95(
        &mut self,
        now: Duration,
        key: &str,
        started_at: Option<Duration>,
        now_value: Histogram,
    ) -> Result<f64> {
        let history = self
            .pods
            .entry(key.to_owned())
            .or_insert_with(|| PodHistory {
                started_at,
                window: SnapshotWindow::new(HISTOGRAM_DELTA_WINDOW, HISTOGRAM_RETENTION),
            });
        if history.started_at != started_at {
            history.window.clear();
            history.started_at = started_at;
        }
        let past = history.window.last_unfresh(now).map(|(_, h)| h);
        let value = quantile_in_diff(95, &now_value, past);
        history.window.append(now, now_value);
        value
    }

    /// Forgets pods whose key is not in `live` (pods that went away).
    pub fn retain(&mut self, mut live: impl FnMut(&str) -> bool) {
        self.pods.retain(|k, _| live(k));
    }
}

#[cfg(test)]
mod tests;
