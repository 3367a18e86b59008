//! `--kube-api-qps` / `--kube-api-burst`: a client-side limit on the requests sent to the API
//! server, as client-go's rate limiter (Go's `rest.Config.QPS` / `Burst`).

use std::time::Duration;

use tower::limit::RateLimitLayer;

/// The layer that limits a kube client to `qps` requests per second on average, at most
/// `burst` of them back to back: `burst` requests per window of `burst / qps` seconds
/// (tower's fixed-window `RateLimit`; client-go refills a token bucket continuously, which
/// gives the same average and the same largest burst). `burst` 0 means `qps` rounded up
/// (at least 1).
///
/// Returns `None` (no limit) when `qps` is 0, negative or not finite: kube-rs has no default
/// limit, unlike client-go's 5 QPS / burst 10 for an unset QPS.
pub fn rate_limit(qps: f64, burst: u32) -> Option<RateLimitLayer> {
    let (requests, window) = rate_window(qps, burst)?;
    Some(RateLimitLayer::new(requests, window))
}

/// `(requests, window)` of [`rate_limit`].
pub(crate) fn rate_window(qps: f64, burst: u32) -> Option<(u64, Duration)> {
    if !qps.is_finite() || qps <= 0.0 {
        return None;
    }
    let requests = match burst {
        // Bounded by u32::MAX above, so the cast is exact.
        0 => qps.ceil().min(f64::from(u32::MAX)) as u64,
        n => u64::from(n),
    }
    .max(1);
    Some((requests, Duration::from_secs_f64(requests as f64 / qps)))
}

#[cfg(test)]
mod tests;
