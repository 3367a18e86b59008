//! The rest of a client body the router does not hold ([`Tail`]): a multipart upload after
//! the end of its `model` field, handed to the engine as it arrives. It is read under the
//! same limits as a held body (the size limit counted from the body's first byte, the idle
//! and total read timeouts counted from the start of the read), and can be taken once: by
//! the first upstream attempt whose connection asks for it ([`Tail::take`]). A read that
//! fails records its error ([`Tail::failure`]) for the forward stage to answer with, and
//! fails the upstream body, which aborts the engine request.

use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use tokio::time::{Instant, Sleep};

use super::BoxError;
use super::read::read_error;
use crate::error::Error;

#[cfg(test)]
mod tests;

/// Why an upstream body built on a [`Tail`] ended early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TailError {
    /// The client body failed (too large, too slow, the client went away); the error the
    /// client gets is [`Tail::failure`].
    #[error("the client request body failed: {reason}")]
    Client {
        /// The client error, for the engine connection's log.
        reason: String,
    },
    /// An earlier attempt took the rest of the body already (never sent twice).
    #[error("the rest of the client request body was sent to an earlier endpoint")]
    Taken,
}

/// Where the tail is: not asked for yet, taken by an attempt, or failed while read.
enum Slot {
    Waiting(TailReader),
    Taken,
    Failed(Error),
}

/// The rest of a client body after its held prefix, taken once (see the module doc).
/// Cloning shares the one tail.
#[derive(Clone)]
pub(crate) struct Tail {
    slot: Arc<Mutex<Slot>>,
    size: SizeHint,
}

impl std::fmt::Debug for Tail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tail")
            .field("taken", &self.taken())
            .field("size", &self.size)
            .finish()
    }
}

/// The limits the tail is read under, carried on from the read of its prefix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TailLimits {
    /// The body's size limit (`maxBodyBytes`), for the error message; the count itself is
    /// the `http_body_util::Limited` the body is wrapped in.
    pub(crate) max_bytes: usize,
    /// No gap between two reads longer than this (`bodyReadIdleTimeout`).
    pub(crate) idle: Duration,
    /// The whole body's read timeout (`bodyReadTimeout`), for the error message.
    pub(crate) total: Duration,
    /// When the whole body's read time ends.
    pub(crate) deadline: Instant,
}

impl Tail {
    /// The tail `body` (already size-limited), read under `lim`.
    pub(crate) fn new(body: UnsyncBoxBody<Bytes, BoxError>, lim: TailLimits) -> Self {
        let size = body.size_hint();
        let reader = TailReader {
            body,
            lim,
            timer: Box::pin(tokio::time::sleep_until(lim.deadline)),
            idle_timer: false,
            report: Weak::new(),
            done: false,
            watch: None,
        };
        Self {
            slot: Arc::new(Mutex::new(Slot::Waiting(reader))),
            size,
        }
    }

    /// Reads the tail's form with `watch` as it passes: a second `model` part fails the
    /// tail with the watch's error (the engine request is aborted, the client gets 400).
    pub(crate) fn watching(self, watch: super::form::FormWatch) -> Self {
        if let Slot::Waiting(r) = &mut *self.lock() {
            r.watch = Some(watch);
        }
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The tail, to read; `None` once taken.
    pub(crate) fn take(&self) -> Option<TailReader> {
        let mut slot = self.lock();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Waiting(mut r) => {
                r.report = Arc::downgrade(&self.slot);
                r.rearm();
                Some(r)
            }
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Whether an attempt took the tail (a request whose tail is taken is not retried).
    pub(crate) fn taken(&self) -> bool {
        !matches!(*self.lock(), Slot::Waiting(_))
    }

    /// The error the client body's read failed with, once.
    pub(crate) fn failure(&self) -> Option<Error> {
        let mut slot = self.lock();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Failed(e) => Some(e),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// The size of the tail as the client declared it (`Content-Length` less the prefix).
    pub(crate) fn size_hint(&self) -> SizeHint {
        self.size
    }
}

/// A taken [`Tail`]: the client body's rest as a [`Body`], under its limits.
pub(crate) struct TailReader {
    body: UnsyncBoxBody<Bytes, BoxError>,
    lim: TailLimits,
    /// The earlier of the idle and the total deadline.
    timer: Pin<Box<Sleep>>,
    /// Whether `timer` is the idle deadline.
    idle_timer: bool,
    /// The slot a failure is recorded in.
    report: Weak<Mutex<Slot>>,
    done: bool,
    /// The form watch the data passes through, if any.
    watch: Option<super::form::FormWatch>,
}

impl TailReader {
    /// Sets the timer to the next read's deadline: the idle timeout from now, or the total
    /// deadline when that is earlier.
    fn rearm(&mut self) {
        let idle_end = Instant::now() + self.lim.idle;
        let (end, idle) = if idle_end < self.lim.deadline {
            (idle_end, true)
        } else {
            (self.lim.deadline, false)
        };
        self.idle_timer = idle;
        self.timer.as_mut().reset(end);
    }

    /// Records `e` for the forward stage and fails the upstream body.
    fn fail(&mut self, e: Error) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.done = true;
        let reason = e.to_string();
        if let Some(slot) = self.report.upgrade() {
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Slot::Failed(e);
        }
        Poll::Ready(Some(Err(Box::new(TailError::Client { reason }))))
    }
}

impl Body for TailReader {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => {
                    this.rearm();
                    // Only data goes on: the engine gets a sized or chunked body without
                    // the client's trailers.
                    if let Some(data) = f.data_ref() {
                        if let Some(Err(e)) = this.watch.as_mut().map(|w| w.read(Some(data), cx)) {
                            return this.fail(e);
                        }
                        return Poll::Ready(Some(Ok(f)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let e = read_error(&*e, this.lim.max_bytes);
                    return this.fail(e);
                }
                Poll::Ready(None) => {
                    if let Some(Err(e)) = this.watch.as_mut().map(|w| w.read(None, cx)) {
                        return this.fail(e);
                    }
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if this.timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let idle = this.idle_timer;
                    let timeout = if idle { this.lim.idle } else { this.lim.total };
                    return this.fail(Error::BodyTimeout { idle, timeout });
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
