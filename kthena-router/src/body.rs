//! The body types of every router answer: [`RespBody`] (boxed, unsync) and its error type,
//! shared by the proxy, the pipeline's layers, the listeners and the error answers; and the
//! budget of bytes all buffered client bodies may hold together ([`BodyBudget`]), which
//! [`read`] reads them under; the unread rest of a streamed multipart upload ([`tail`]) and
//! the body of every upstream request ([`ReqBody`]).

pub(crate) mod form;
pub(crate) mod read;
pub(crate) mod tail;
mod upstream_req;

mod parse_cost;

pub(crate) use parse_cost::parse_cost;
pub use upstream_req::ReqBody;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use prometheus_client::metrics::gauge::Gauge;

/// Boxed error of response bodies.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The response body type of every router answer.
pub(crate) type RespBody = UnsyncBoxBody<Bytes, BoxError>;

/// A whole body from bytes.
#[must_use]
pub(crate) fn full(b: impl Into<Bytes>) -> RespBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

// === Reading client bodies ===

/// The bytes of request bodies the router holds, shared by every connection of every
/// listener: a body's bytes are reserved as they arrive and released when the request
/// ends (answered, failed, or its connection dropped). A body that would take the total
/// over the limit is refused (`Error::BodyBudgetExhausted`, 503 with `Retry-After`), so
/// many clients that each send almost `maxBodyBytes` and stall cannot hold more memory
/// than the limit (`listener.maxBufferedBodyBytes`).
#[derive(Debug)]
pub(crate) struct BodyBudget {
    limit: usize,
    used: AtomicUsize,
    gauge: Gauge,
}

impl BodyBudget {
    /// A budget of `limit` bytes, its use published on `gauge`
    /// (`kthena_router_buffered_request_body_bytes`).
    pub(crate) fn new(limit: usize, gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            gauge,
        })
    }

    /// The limit, bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// An empty reservation on this budget.
    pub(crate) fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            bytes: 0,
        }
    }

    /// Takes `n` more bytes for `r`; `false` (nothing taken) when the total would pass the
    /// limit.
    pub(crate) fn grow(&self, r: &mut Reservation, n: usize) -> bool {
        let ok = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|t| *t <= self.limit)
            })
            .is_ok();
        if ok {
            r.bytes += n;
            self.gauge.inc_by(i64::try_from(n).unwrap_or(i64::MAX));
        }
        ok
    }
}

/// Bytes taken from a [`BodyBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
            self.budget
                .gauge
                .dec_by(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        }
    }
}

/// The reservation of a request's body, kept in the request's extensions so that the bytes
/// stay counted until the request is done with.
#[derive(Debug, Clone)]
pub(crate) struct HeldBody(
    #[allow(dead_code, reason = "held for its Drop")] pub(crate) Arc<Reservation>,
);

/// The default of `listener.maxBufferedBodyBytes` (`None` in the config): a quarter of the
/// container's memory limit (cgroup v2 `memory.max`, else v1 `memory.limit_in_bytes`), or
/// 256 MiB when there is none; never below `max_body_bytes`, so one largest body always
/// fits. A quarter leaves room for the buffer's growth (up to twice the bytes held) and
/// for everything else the router keeps.
pub(crate) fn default_body_budget(max_body_bytes: usize) -> usize {
    const NO_LIMIT: usize = 256 * 1024 * 1024;
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
    // cgroup v1 answers a huge number (about 2^63) for "no limit".
    .filter(|n| *n < 1 << 60);
    let derived = cgroup.map_or(NO_LIMIT, |m| usize::try_from(m / 4).unwrap_or(NO_LIMIT));
    derived.max(max_body_bytes)
}

#[cfg(test)]
mod tests;
