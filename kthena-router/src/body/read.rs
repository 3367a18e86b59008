//! The one reader of client request bodies ([`read_body`]): size limit, read timeouts and
//! a reservation on the shared body budget ([`crate::body::BodyBudget`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use super::form;
use super::tail::{Tail, TailLimits};
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
    check_head(&parts.headers, lim.max_bytes)?;
    let mut read = Reading::new(body, lim);
    while read.next().await? {}
    let Reading { buf, held, .. } = read;
    Ok(ReadBody {
        parts,
        bytes: buf.freeze(),
        held,
    })
}

/// Refuses a body the router cannot read: a content coding other than `identity`
/// ([`Error::UnsupportedEncoding`]), a declared length over `limit` ([`Error::BodyTooLarge`]).
fn check_head(headers: &http::HeaderMap, limit: usize) -> Result<(), Error> {
    if let Some(enc) = headers.get(header::CONTENT_ENCODING)
        && !enc.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        return Err(Error::UnsupportedEncoding {
            encoding: String::from_utf8_lossy(enc.as_bytes()).into_owned(),
        });
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Error::BodyTooLarge { limit });
    }
    Ok(())
}

/// A body being read into memory under [`ReadLimits`].
struct Reading<'a, B> {
    body: Limited<B>,
    buf: BytesMut,
    held: Reservation,
    clock: ReadClock,
    lim: ReadLimits<'a>,
}

impl<'a, B> Reading<'a, B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    fn new(body: B, lim: ReadLimits<'a>) -> Self {
        Self {
            body: Limited::new(body, lim.max_bytes),
            buf: BytesMut::new(),
            held: lim.budget.reservation(),
            clock: ReadClock::new(lim.idle_timeout, lim.total_timeout),
            lim,
        }
    }

    /// Reads the next frame into the buffer, its bytes reserved on the budget first;
    /// `false` at the end of the body.
    async fn next(&mut self) -> Result<bool, Error> {
        match self.clock.next(self.body.frame()).await? {
            None => Ok(false),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    if !self.lim.budget.grow(&mut self.held, data.len()) {
                        return Err(Error::BodyBudgetExhausted {
                            budget: self.lim.budget.limit(),
                        });
                    }
                    // Grown as data arrives, not to the declared length: a client that
                    // declares 10 MiB and sends one byte holds one byte.
                    self.buf.extend_from_slice(&data);
                }
                Ok(true)
            }
            Some(Err(e)) => Err(read_error(&*e, self.lim.max_bytes)),
        }
    }
}

/// The bytes of a multipart body within which the router looks for the `model` field to
/// stream the rest ([`read_form`]): the common clients (the OpenAI SDKs, curl `-F` in the
/// documented order) send `model` before the file, a few hundred bytes in.
pub(crate) const MODEL_FIELD_WITHIN: usize = 1024 * 1024;

/// A multipart body read up to the end of its `model` field: the prefix (held on the
/// budget) and the rest, if any, to stream ([`Tail`]).
#[derive(Debug)]
pub(crate) struct FormHead {
    /// The request without its body.
    pub(crate) parts: http::request::Parts,
    /// The bytes read: up to and past the end of the `model` part (whole reads), or the
    /// whole body.
    pub(crate) prefix: Bytes,
    /// The prefix's bytes on the shared budget.
    pub(crate) held: Reservation,
    /// The `model` field, trimmed.
    pub(crate) model: String,
    /// The rest of the body, not read yet; `None` when the prefix is the whole body.
    pub(crate) tail: Option<Tail>,
}

/// Reads the multipart body of `req` (boundary `boundary`) under `lim` until its `model`
/// field is complete, then leaves the rest unread ([`FormHead::tail`]). The prefix is
/// scanned each time it doubled, until it passed [`MODEL_FIELD_WITHIN`] bytes; a `model`
/// field not within that, or a body that ends before the rest would begin, is read whole as
/// [`read_body`] does (held, `tail` `None`).
///
/// # Errors
/// As [`read_body`], and as `form::model_in_prefix` for the form itself.
pub(crate) async fn read_form<B>(
    req: Request<B>,
    lim: ReadLimits<'_>,
    boundary: &str,
) -> Result<FormHead, Error>
where
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    check_head(&parts.headers, lim.max_bytes)?;
    let mut read = Reading::new(body, lim);
    let mut scan_at = 1;
    let mut more = true;
    let mut model = None;
    while more {
        more = read.next().await? && !read.body.is_end_stream();
        let len = read.buf.len();
        // The last scan may see somewhat more than `MODEL_FIELD_WITHIN`: one read past it.
        if more && len >= scan_at && scan_at <= MODEL_FIELD_WITHIN {
            scan_at = len * 2;
            // Copies of at most twice the last prefix scanned, all scans together.
            let prefix = Bytes::copy_from_slice(&read.buf);
            model = form::model_in_prefix(prefix, boundary).await?;
            if model.is_some() {
                break;
            }
        }
    }
    let Reading {
        body,
        buf,
        held,
        clock,
        ..
    } = read;
    let prefix = buf.freeze();
    let (model, tail) = match model {
        Some(m) if !body.is_end_stream() => {
            let tail_lim = TailLimits {
                max_bytes: lim.max_bytes,
                idle: lim.idle_timeout,
                total: lim.total_timeout,
                deadline: clock.deadline,
            };
            let rest = body.map_err(Into::into).boxed_unsync();
            let watch = form::FormWatch::new(prefix.clone(), boundary);
            (m, Some(Tail::new(rest, tail_lim).watching(watch)))
        }
        // The whole form is held: read it all (a second `model` part is refused).
        Some(_) => (form::model_field(prefix.clone(), boundary).await?, None),
        None => (form::model_field(prefix.clone(), boundary).await?, None),
    };
    Ok(FormHead {
        parts,
        prefix,
        held,
        model,
        tail,
    })
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
pub(super) fn read_error(
    e: &(dyn std::error::Error + Send + Sync + 'static),
    limit: usize,
) -> Error {
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
