//! The body types of every router answer: [`RespBody`] (boxed, unsync) and its error type,
//! shared by the proxy, the pipeline's layers, the listeners and the error answers; and the
//! one reader of client request bodies ([`read_body`]): size limit, read timeouts and the
//! budget of bytes all buffered bodies may hold together ([`BodyBudget`]).

mod parse_cost;

pub(crate) use parse_cost::parse_cost;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, header};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Limited};
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;

use crate::error::Error;
use crate::listener::ListenerConfig;

/// Boxed error of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The response body type of every router answer.
pub type RespBody = UnsyncBoxBody<Bytes, BoxError>;

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
/// over the limit is refused ([`Error::BodyBudgetExhausted`], 503 with `Retry-After`), so
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

/// The limits every client body is read under: size, read timeouts, the shared budget.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadLimits<'a> {
    /// Largest body, bytes (413 beyond).
    pub(crate) max_bytes: usize,
    /// The body read timeouts (`bodyReadIdleTimeout`, `bodyReadTimeout`).
    pub(crate) listener: &'a ListenerConfig,
    /// The bytes all bodies may hold together.
    pub(crate) budget: &'a Arc<BodyBudget>,
}

/// A whole client body, and its bytes' reservation on the budget.
#[derive(Debug)]
pub(crate) struct ReadBody {
    /// The request without its body.
    pub(crate) parts: http::request::Parts,
    /// The body.
    pub(crate) bytes: Bytes,
    /// Its bytes on the shared budget, released when dropped.
    pub(crate) held: Reservation,
}

/// Reads the whole body of `req`, the one way the router reads a client body (inference
/// and LoRA admin paths alike): at most `max_bytes` ([`Error::BodyTooLarge`], 413), no gap
/// between two reads longer than the idle timeout and no more than the total timeout for
/// all of it ([`Error::BodyTimeout`], 408), each arriving chunk reserved on the budget
/// first ([`Error::BodyBudgetExhausted`], 503). Only `identity` content coding
/// ([`Error::UnsupportedEncoding`], 415).
///
/// # Errors
/// As listed, and [`Error::ClientClosedRequest`] or [`Error::BodyRead`] when the transport
/// fails.
pub(crate) async fn read_body<B>(req: Request<B>, lim: ReadLimits<'_>) -> Result<ReadBody, Error>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    if let Some(enc) = parts.headers.get(header::CONTENT_ENCODING)
        && !enc.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        return Err(Error::UnsupportedEncoding {
            encoding: String::from_utf8_lossy(enc.as_bytes()).into_owned(),
        });
    }
    let limit = lim.max_bytes;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Error::BodyTooLarge { limit });
    }
    let mut held = lim.budget.reservation();
    let mut body = Limited::new(body, limit);
    let mut buf = bytes::BytesMut::new();
    let mut clock = ReadClock::new(lim.listener);
    loop {
        let frame = clock.next(body.frame()).await?;
        match frame {
            None => {
                return Ok(ReadBody {
                    parts,
                    bytes: buf.freeze(),
                    held,
                });
            }
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    if !lim.budget.grow(&mut held, data.len()) {
                        return Err(Error::BodyBudgetExhausted {
                            budget: lim.budget.limit(),
                        });
                    }
                    // Grown as data arrives, not to the declared length: a client that
                    // declares 10 MiB and sends one byte holds one byte.
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(read_error(&*e, limit)),
        }
    }
}

/// The idle and total deadlines of one body read.
struct ReadClock<'a> {
    l: &'a ListenerConfig,
    deadline: Instant,
}

impl<'a> ReadClock<'a> {
    fn new(l: &'a ListenerConfig) -> Self {
        Self {
            l,
            deadline: Instant::now() + l.body_read_timeout,
        }
    }

    /// `next`'s output, or [`Error::BodyTimeout`] when the idle or the total time ran out
    /// first.
    async fn next<F: std::future::Future>(&mut self, next: F) -> Result<F::Output, Error> {
        let idle_end = Instant::now() + self.l.body_read_idle_timeout;
        let (end, idle) = if idle_end < self.deadline {
            (idle_end, true)
        } else {
            (self.deadline, false)
        };
        tokio::time::timeout_at(end, next).await.map_err(|_| {
            let timeout = if idle {
                self.l.body_read_idle_timeout
            } else {
                self.l.body_read_timeout
            };
            Error::BodyTimeout { idle, timeout }
        })
    }
}

/// The error of a failed body read: too large, the client went away, or another transport
/// failure.
fn read_error(e: &(dyn std::error::Error + Send + Sync + 'static), limit: usize) -> Error {
    if e.downcast_ref::<http_body_util::LengthLimitError>()
        .is_some()
    {
        Error::BodyTooLarge { limit }
    } else if client_went_away(e) {
        Error::ClientClosedRequest {
            reason: e.to_string(),
        }
    } else {
        Error::BodyRead {
            reason: e.to_string(),
        }
    }
}

/// Whether a body read error means the client closed or reset its connection (an early EOF,
/// a reset, a broken pipe), as opposed to a malformed body.
fn client_went_away(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cur = err.source();
    }
    false
}

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
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_taken_as_bytes_arrive_and_given_back_on_drop() {
        let gauge = Gauge::default();
        let budget = BodyBudget::new(100, gauge.clone());
        let mut a = budget.reservation();
        let mut b = budget.reservation();
        assert!(budget.grow(&mut a, 60));
        assert!(budget.grow(&mut b, 40));
        assert!(!budget.grow(&mut b, 1));
        assert_eq!(gauge.get(), 100);
        drop(a);
        assert_eq!(gauge.get(), 40);
        assert!(budget.grow(&mut b, 60));
        drop(b);
        assert_eq!((gauge.get(), budget.used.load(Ordering::Acquire)), (0, 0));
    }

    #[test]
    fn the_default_budget_holds_at_least_one_largest_body() {
        assert!(default_body_budget(1 << 40) >= 1 << 40);
        assert!(default_body_budget(1) >= 1);
    }
}
