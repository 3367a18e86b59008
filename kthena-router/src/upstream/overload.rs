//! Overload protection: caps on requests in flight (for the router and per endpoint) and a
//! circuit breaker per endpoint. Past a cap the router answers 503 with `Retry-After` at
//! once instead of queueing sockets; an endpoint whose breaker is open is not offered to the
//! scheduler until its cool-down has passed, and then gets one probe request.
//!
//! | family | type | labels | meaning |
//! |---|---|---|---|
//! | `kthena_router_overload_rejected_total` | counter | `reason` | requests answered 503 at once: `router_limit` (`overload.maxInFlight` reached), `endpoint_limit` (every candidate endpoint at `overload.maxInFlightPerEndpoint`), `circuit_open` (every candidate endpoint's breaker open) |
//! | `kthena_router_circuit_breaker_state` | gauge | `namespace`, `endpoint` | 0 closed, 1 open, 2 half-open (one probe allowed) |
//! | `kthena_router_circuit_breaker_opened_total` | counter | `namespace`, `endpoint` | times the breaker opened |

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use tokio::time::Instant;

/// The `overload:` section of the router config. Read at start only.
///
/// ```yaml
/// overload:
///   maxInFlight: 10000
///   maxInFlightPerEndpoint: 1024
///   retryAfter: 1s
///   breakerFailures: 5
///   breakerCoolDown: 10s
/// ```
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct OverloadConfig {
    /// Most `/v1/*` inference requests in flight in the router, from admission to the end of
    /// the response body (default 10000, the listener's `maxConnections`; `0` = no cap; flag
    /// `--max-in-flight`). Beyond it: 503 `server_overloaded` with `Retry-After`.
    pub max_in_flight: usize,
    /// Most requests the router has open to one endpoint (default 1024, four times vLLM's
    /// default `max_num_seqs` of 256: more would only wait in the engine's queue; `0` = no
    /// cap; flag `--max-in-flight-per-endpoint`). Endpoints at the cap are not offered to the
    /// scheduler; when all are, 503 with `Retry-After`.
    pub max_in_flight_per_endpoint: u32,
    /// The `Retry-After` of a 503 for a cap, rounded up to whole seconds (default `1s`).
    #[serde(with = "crate::config::duration::go_duration")]
    pub retry_after: Duration,
    /// Consecutive connect errors or 5xx answers of an endpoint that open its circuit
    /// breaker (default 5; `0` disables the breaker; flag `--breaker-failures`).
    pub breaker_failures: u32,
    /// How long an open breaker keeps the endpoint out before one probe request is let
    /// through (half-open) (default `10s`; flag `--breaker-cool-down`). A good probe closes
    /// the breaker, a failed one opens it for another cool-down.
    #[serde(with = "crate::config::duration::go_duration")]
    pub breaker_cool_down: Duration,
}

impl Default for OverloadConfig {
    /// 10000 in flight, 1024 per endpoint, `Retry-After: 1`, breaker after 5 failures with a
    /// 10 s cool-down.
    fn default() -> Self {
        Self {
            max_in_flight: 10_000,
            max_in_flight_per_endpoint: 1024,
            retry_after: Duration::from_secs(1),
            breaker_failures: 5,
            breaker_cool_down: Duration::from_secs(10),
        }
    }
}

/// Circuit breaker states, as exported by `kthena_router_circuit_breaker_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests pass (0).
    Closed = 0,
    /// Requests are kept away until the cool-down ends (1).
    Open = 1,
    /// The cool-down ended: one probe request may pass (2).
    HalfOpen = 2,
}

/// One endpoint's circuit breaker (the traffic-side companion of the scrape-side
/// [`DOWN_AFTER_FAILURES`](crate::DOWN_AFTER_FAILURES)).
#[derive(Debug, Default)]
pub struct Breaker {
    inner: Mutex<BreakerInner>,
}

#[derive(Debug, Default)]
struct BreakerInner {
    failures: u32,
    open_until: Option<Instant>,
    probing: bool,
}

impl Breaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerInner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The state at `now`.
    #[must_use]
    pub fn state(&self, now: Instant) -> BreakerState {
        let b = self.lock();
        match b.open_until {
            None => BreakerState::Closed,
            Some(_) if b.probing => BreakerState::HalfOpen,
            Some(t) if now < t => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// Whether a request may be offered to the endpoint at `now`: closed, or half-open
    /// (the cool-down is over and no probe is out). Changes nothing.
    #[must_use]
    pub fn available(&self, now: Instant) -> bool {
        self.lock().open_until.is_none_or(|t| now >= t)
    }

    /// Time until the cool-down ends (zero when it has).
    #[must_use]
    pub fn remaining(&self, now: Instant) -> Duration {
        self.lock()
            .open_until
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Claims the right to send one request at `now`: `Some(Closed)` when closed,
    /// `Some(HalfOpen)` for the one probe once the cool-down is over, `None` when open or
    /// while the probe is out. The probe holds the endpoint for another `cool_down`, so a
    /// probe that never reports (its client went away) only delays the next one.
    pub fn try_pass(&self, now: Instant, cool_down: Duration) -> Option<BreakerState> {
        let mut b = self.lock();
        match b.open_until {
            None => Some(BreakerState::Closed),
            Some(t) if now >= t => {
                b.probing = true;
                b.open_until = Some(now + cool_down);
                Some(BreakerState::HalfOpen)
            }
            Some(_) => None,
        }
    }

    /// Records an attempt's result; returns the new state when it changed. A success
    /// closes the breaker; the `threshold`-th failure in a row (or a failed probe) opens it
    /// until `now + cool_down`. `threshold == 0` never opens it.
    pub fn record(
        &self,
        success: bool,
        now: Instant,
        threshold: u32,
        cool_down: Duration,
    ) -> Option<BreakerState> {
        let mut b = self.lock();
        if success {
            b.failures = 0;
            b.probing = false;
            return b.open_until.take().map(|_| BreakerState::Closed);
        }
        b.failures = b.failures.saturating_add(1);
        let probe_failed = b.open_until.is_some() && b.probing;
        if threshold > 0 && (probe_failed || (b.open_until.is_none() && b.failures >= threshold)) {
            b.open_until = Some(now + cool_down);
            b.probing = false;
            return Some(BreakerState::Open);
        }
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndpointLabels {
    namespace: String,
    endpoint: String,
}

/// The overload families (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct OverloadMetrics {
    rejected: Family<ReasonLabel, Counter>,
    state: Family<EndpointLabels, Gauge>,
    opened: Family<EndpointLabels, Counter>,
    /// The endpoints with breaker series, to drop them when an endpoint goes away.
    known: std::sync::Arc<Mutex<std::collections::HashSet<EndpointLabels>>>,
}

impl OverloadMetrics {
    /// Creates the families and registers them.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kthena_router_overload_rejected",
            "Requests answered 503 at once by overload protection, by reason",
            m.rejected.clone(),
        );
        registry.register(
            "kthena_router_circuit_breaker_state",
            "Circuit breaker state per endpoint: 0 closed, 1 open, 2 half-open",
            m.state.clone(),
        );
        registry.register(
            "kthena_router_circuit_breaker_opened",
            "Times an endpoint's circuit breaker opened",
            m.opened.clone(),
        );
        m
    }

    /// `kthena_router_overload_rejected_total{reason}` +1.
    pub(crate) fn rejected(&self, reason: &'static str) {
        self.rejected.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Sets `kthena_router_circuit_breaker_state` of an endpoint (and counts openings).
    pub(crate) fn breaker(&self, namespace: &str, endpoint: &str, state: BreakerState) {
        let l = EndpointLabels {
            namespace: namespace.to_owned(),
            endpoint: endpoint.to_owned(),
        };
        if state == BreakerState::Open {
            self.opened.get_or_create(&l).inc();
        }
        self.state.get_or_create(&l).set(state as i64);
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(l);
    }

    /// Drops the breaker series of endpoints for which `keep(namespace, endpoint)` is false
    /// (those the new snapshot no longer has), so an alert on an open breaker does not fire
    /// for an endpoint that is gone.
    pub(crate) fn retain_endpoints(&self, keep: impl Fn(&str, &str) -> bool) {
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        known.retain(|l| {
            let kept = keep(&l.namespace, &l.endpoint);
            if !kept {
                self.state.remove(l);
                self.opened.remove(l);
            }
            kept
        });
    }
}

#[cfg(test)]
mod tests;
