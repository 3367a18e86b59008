//! The `coldStart:` section of the router config.

use std::time::Duration;

use serde::Deserialize;

/// The `coldStart:` section of the router config: how requests for a ModelServer with no
/// ready endpoint (scaled to zero, or still starting) are held. Go Kthena has no such
/// section: its router answers 503 at once (`pkg/kthena-router/router/router.go`).
///
/// ```yaml
/// coldStart:
///   enabled: true
///   holdTimeout: 5m
///   maxHeldRequests: 1000
///   retryAfter: 10s
/// ```
///
/// Hot reload applies the new values to requests that arrive afterwards; a request already
/// held keeps the timeout it arrived with (and stays held when `enabled` turns false).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ColdStartConfig {
    /// Hold requests instead of answering 503 `no_ready_endpoint` (default true).
    pub enabled: bool,
    /// The longest a request is held; past it the answer is 503 `cold_start_timeout`
    /// (default `5m`, Go duration, more than 0).
    #[serde(with = "crate::config::duration::go_duration")]
    pub hold_timeout: Duration,
    /// Most requests held at once per ModelServer (default 1000, at least 1); one more is
    /// answered 503 `cold_start_queue_full` at once.
    pub max_held_requests: usize,
    /// The `Retry-After` of the 503 answers, whole seconds (default `10s`, at least `1s`;
    /// a fraction is rounded up).
    #[serde(with = "crate::config::duration::go_duration")]
    pub retry_after: Duration,
}

impl Default for ColdStartConfig {
    /// Enabled, 5 min timeout, 1000 held per ModelServer, `Retry-After: 10`.
    fn default() -> Self {
        Self {
            enabled: true,
            hold_timeout: Duration::from_secs(300),
            max_held_requests: 1000,
            retry_after: Duration::from_secs(10),
        }
    }
}

impl ColdStartConfig {
    /// Checks the values.
    ///
    /// # Errors
    /// The reason, naming the key (`coldStart.holdTimeout: must be greater than 0`,
    /// `coldStart.maxHeldRequests: must be at least 1`, `coldStart.retryAfter: must be at
    /// least 1s`).
    pub fn validate(&self) -> Result<(), String> {
        if self.hold_timeout.is_zero() {
            return Err("coldStart.holdTimeout: must be greater than 0".into());
        }
        if self.max_held_requests == 0 {
            return Err(
                "coldStart.maxHeldRequests: must be at least 1 (there is no unbounded hold)".into(),
            );
        }
        if self.retry_after < Duration::from_secs(1) {
            return Err("coldStart.retryAfter: must be at least 1s".into());
        }
        Ok(())
    }

    /// [`ColdStartConfig::retry_after`] rounded up to whole seconds.
    #[must_use]
    pub fn retry_after_secs(&self) -> Duration {
        let s = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        Duration::from_secs(s.max(1))
    }
}
