//! Which metric values the autoscaler acts on.
//!
//! A well-formed Prometheus exposition (or PromQL answer) can carry values that parse but
//! mean nothing for scaling: `NaN`, `+Inf`, `-Inf`, a negative count, or an absurdly large
//! number (`1e300`). Each of them drives the recommendation to the minimum or the maximum in
//! one round (`NaN / target` ceils to 0, `+Inf / target` saturates). Such a value is no
//! sample: [`check_sample`] says why, and the caller skips the metric for the round.

/// Largest metric value the autoscaler acts on: `1e15`.
///
/// The metrics that drive scaling are per-pod counts (waiting or running requests), ratios
/// (KV-cache usage, 0..1), latencies in seconds, or rates and token counts summed over pods
/// and over time. No serving fleet comes near 1e15 of any of them (a million pods each
/// holding a billion queued requests), while `f64` still counts in integers exactly up to
/// 2^53 ≈ 9e15, so the bound sits below where arithmetic on the values loses meaning.
pub const MAX_SAMPLE: f64 = 1e15;

/// Why a metric value is not a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidSample {
    /// `NaN`.
    #[error("not a number")]
    NotANumber,
    /// `+Inf` or `-Inf`.
    #[error("infinite")]
    Infinite,
    /// Below zero (no count, ratio, latency or rate the autoscaler reads is negative).
    #[error("negative")]
    Negative,
    /// Finite but above [`MAX_SAMPLE`].
    #[error("above the largest usable value 1e15")]
    TooLarge,
}

/// `Ok(v)` when `v` is a usable sample: finite, `0 ≤ v ≤` [`MAX_SAMPLE`] (`-0.0` counts as
/// zero).
///
/// # Errors
/// The [`InvalidSample`] that says why `v` is not one.
///
/// ```
/// use kthena_autoscale::{InvalidSample, check_sample};
/// assert_eq!(check_sample(3.5), Ok(3.5));
/// assert_eq!(check_sample(f64::NAN), Err(InvalidSample::NotANumber));
/// assert_eq!(check_sample(-1.0), Err(InvalidSample::Negative));
/// assert_eq!(check_sample(1e300), Err(InvalidSample::TooLarge));
/// ```
pub fn check_sample(v: f64) -> Result<f64, InvalidSample> {
    if v.is_nan() {
        Err(InvalidSample::NotANumber)
    } else if v.is_infinite() {
        Err(InvalidSample::Infinite)
    } else if v < 0.0 {
        Err(InvalidSample::Negative)
    } else if v > MAX_SAMPLE {
        Err(InvalidSample::TooLarge)
    } else {
        Ok(v)
    }
}

/// Whether `v` is a usable sample ([`check_sample`] accepts it).
#[must_use]
pub fn is_usable(v: f64) -> bool {
    check_sample(v).is_ok()
}

#[cfg(test)]
mod tests;
