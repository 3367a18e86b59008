//! The one reader of client request bodies ([`read_body`]): size limit, read timeouts and
//! a reservation on the shared body budget ([`crate::body::BodyBudget`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use crate::body::{BodyBudget, BoxError, Reservation};
use crate::error::Error;

/// The limits every client body is read under: size, read timeouts, the shared budget.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadLimits<'a> {
    /// Largest body, bytes (413 beyond).
    pub(crate) max_bytes: usize,
    /// No gap between two reads longer than this (`bodyReadIdleTimeout`).
    pub(crate) idle_timeout: Duration,
    /// The whole body within this (`bodyReadTimeout`).
    pub(crate) total_timeout: Duration,
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
    let mut clock = ReadClock::new(lim.idle_timeout, lim.total_timeout);
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
struct ReadClock {
    idle: Duration,
    total: Duration,
    deadline: Instant,
}

impl ReadClock {
    fn new(idle: Duration, total: Duration) -> Self {
        Self {
            idle,
            total,
            deadline: Instant::now() + total,
        }
    }

    /// `next`'s output, or [`Error::BodyTimeout`] when the idle or the total time ran out
    /// first.
    async fn next<F: std::future::Future>(&mut self, next: F) -> Result<F::Output, Error> {
        let idle_end = Instant::now() + self.idle;
        let (end, idle) = if idle_end < self.deadline {
            (idle_end, true)
        } else {
            (self.deadline, false)
        };
        tokio::time::timeout_at(end, next).await.map_err(|_| {
            let timeout = if idle { self.idle } else { self.total };
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
