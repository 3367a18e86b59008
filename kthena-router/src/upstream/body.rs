//! The response side of the proxy: the streaming body that passes upstream bytes through as
//! they arrive, reads usage, hides the usage chunk the router asked for, turns a mid-stream
//! upstream failure into an error-terminated stream, and reports how the request ended to its
//! [`Accounting`] (end of body, upstream failure, or client disconnect).
//!
//! Per upstream chunk in steady state it forwards the same [`Bytes`] (no copy, no
//! allocation): the SSE filter ([`SseFilter`]) decides with substring searches, a
//! non-streamed body is kept by reference to read `usage` at the end, and the upstream idle
//! timer is re-armed only when it fires (the last frame's time is noted per chunk).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use kthena_openai::{ResponseProbe, SseFilter, Usage, usage_from};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use crate::body::BoxError;
use crate::telemetry::accounting::Accounting;
use crate::upstream::conn::UpBody;
use serde::Deserialize;

/// Pause between the SSE error event and breaking the stream, so the event is flushed.
const ERROR_FLUSH_PAUSE: Duration = Duration::from_millis(10);

/// Largest non-streaming response kept whole to read `usage` from, in bytes.
const MAX_USAGE_COPY: usize = 4 * 1024 * 1024;

/// Bytes at least kept of the end of a larger non-streaming response, to find its `usage`.
const USAGE_TAIL: usize = 64 * 1024;

/// The streaming response body.
#[derive(Debug)]
pub(crate) struct ProxyBody {
    inner: UpBody,
    acct: Accounting,
    saw_first_byte: bool,
    status: u16,
    sse: Option<SseFilter>,
    /// A non-streamed body's chunks (shared, not copied), to read `usage` from at the end.
    json: JsonChunks,
    output_tokens: u64,
    /// The upstream error to end the client stream with, and a short pause before it so
    /// that hyper flushes the error event written just before.
    pending_error: Option<(BoxError, Pin<Box<Sleep>>)>,
    /// The upstream idle timeout.
    idle: Option<IdleTimer>,
    /// Cancelled when the router closes connections left after its drain timeout.
    drain_cut: Option<CancellationToken>,
    finished: bool,
}

/// The upstream idle timeout: the time of the last upstream frame, and a timer that is
/// moved to `last + timeout` only when it fires early (not on every frame).
#[derive(Debug)]
struct IdleTimer {
    timeout: Duration,
    last: Instant,
    timer: Pin<Box<Sleep>>,
}

impl IdleTimer {
    /// Whether the engine has sent nothing for the timeout (registers the wake-up if not).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.last + self.timeout;
            if due <= Instant::now() {
                return true;
            }
            self.timer.as_mut().reset(due);
        }
    }
}

/// The chunks of a non-streamed body, held by reference: all of it up to
/// [`MAX_USAGE_COPY`] bytes; beyond that only its last [`USAGE_TAIL`] bytes or more, where
/// an OpenAI-shaped answer has its `usage` (after `choices`).
#[derive(Debug, Default)]
struct JsonChunks {
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    len: usize,
    /// The body went past [`MAX_USAGE_COPY`]: `chunks` hold its tail only.
    tail_only: bool,
}

impl JsonChunks {
    fn push(&mut self, data: &Bytes) {
        self.len += data.len();
        self.chunks.push_back(data.clone());
        self.tail_only |= self.len > MAX_USAGE_COPY;
        if self.tail_only {
            while let Some(front) = self.chunks.front()
                && self.len - front.len() >= USAGE_TAIL
            {
                self.len -= front.len();
                self.chunks.pop_front();
            }
        }
    }

    /// `usage.completion_tokens` of the whole body, if it has one.
    fn output_tokens(&self) -> Option<u64> {
        let joined;
        let body: &[u8] = match (self.chunks.len(), self.chunks.front()) {
            (1, Some(b)) => b,
            _ => {
                let mut all = Vec::with_capacity(self.len);
                for b in &self.chunks {
                    all.extend_from_slice(b);
                }
                joined = all;
                &joined
            }
        };
        if self.tail_only {
            return Some(usage_in_tail(body)?.completion_tokens);
        }
        Some(ResponseProbe::parse(body)?.usage()?.completion_tokens)
    }
}

/// The last top-level-looking `"usage": {...}` object in the tail of a JSON answer too
/// large to parse whole. A `"usage"` inside a string is escaped (`\"usage\"`), so the
/// unescaped key is the answer's own.
fn usage_in_tail(tail: &[u8]) -> Option<Usage> {
    const KEY: &[u8] = b"\"usage\"";
    let at = tail.windows(KEY.len()).rposition(|w| w == KEY)?;
    let rest = tail[at + KEY.len()..]
        .trim_ascii_start()
        .strip_prefix(b":")?;
    let mut de = serde_json::Deserializer::from_slice(rest.trim_ascii_start());
    let v = serde_json::Value::deserialize(&mut de).ok()?;
    usage_from(&v)
}

impl ProxyBody {
    pub(crate) fn new(
        inner: UpBody,
        acct: Accounting,
        status: u16,
        sse: bool,
        hide_usage_chunk: bool,
    ) -> Self {
        Self {
            inner,
            acct,
            saw_first_byte: false,
            status,
            sse: sse.then(|| SseFilter::new(hide_usage_chunk)),
            json: JsonChunks::default(),
            output_tokens: 0,
            pending_error: None,
            idle: None,
            drain_cut: None,
            finished: false,
        }
    }

    /// Ends the stream with an error when the engine sends nothing for `timeout` (`None`:
    /// waits as long as the client does).
    pub(crate) fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle = timeout.map(|timeout| IdleTimer {
            timeout,
            last: Instant::now(),
            timer: Box::pin(tokio::time::sleep(timeout)),
        });
        self
    }

    /// Settles a body dropped after `cut` was cancelled as cut by the router's shutdown
    /// (`drain_timeout`, origin `internal`), not as a client that went away.
    pub(crate) fn with_drain_cut(mut self, cut: CancellationToken) -> Self {
        self.drain_cut = Some(cut);
        self
    }

    /// Settles as an upstream transport failure and returns the frame to send: for SSE an
    /// error event (the error itself follows after a short pause), else the error.
    fn fail(&mut self, e: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let msg = format!("upstream stream failed: {e}");
        tracing::warn!(request_id = %self.acct.request_id(), error = %e, "Upstream failed mid-stream; ending the client stream with an error");
        self.end_with_error(e, ("upstream_transport", msg), "upstream_stream_error")
    }

    /// Settles as cut by the router's shutdown (`drain_timeout`, origin `internal`) and
    /// ends the stream as [`Self::fail`] does, the SSE error event's code `drain_timeout`.
    fn cut_by_drain(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let e = crate::error::Error::DrainCut;
        tracing::warn!(request_id = %self.acct.request_id(), "Response still streaming at the drain timeout; ending it with an error");
        let (settled, code) = ((e.finish_reason(), e.to_string()), e.code());
        self.end_with_error(Box::new(e), settled, code)
    }

    /// Settles with `error` and ends the client stream: for SSE an error event of `code`
    /// carrying `error`'s message (`e` itself follows after [`ERROR_FLUSH_PAUSE`], so the
    /// client sees an incomplete response, never a clean end), else `e` at once.
    fn end_with_error(
        &mut self,
        e: BoxError,
        error: (&'static str, String),
        code: &'static str,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let msg = error.1.clone();
        self.finish(Some(error));
        self.idle = None;
        self.drain_cut = None;
        if self.sse.is_none() {
            return Poll::Ready(Some(Err(e)));
        }
        let body = crate::error::openai_error_body(&msg, "server_error", None, code);
        let mut ev = BytesMut::from(&b"data: "[..]);
        ev.extend_from_slice(&body);
        ev.extend_from_slice(b"\n\n");
        let pause = Box::pin(tokio::time::sleep(ERROR_FLUSH_PAUSE));
        self.pending_error = Some((e, pause));
        Poll::Ready(Some(Ok(Frame::data(ev.freeze()))))
    }

    fn finish(&mut self, error: Option<(&'static str, String)>) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(f) = &self.sse {
            // What the engine reported, else (a stream cut before its usage chunk, or an
            // engine that sends none) one token per event streamed.
            self.output_tokens = f.streamed_output_tokens();
        } else if error.is_none()
            && let Some(n) = self.json.output_tokens()
        {
            self.output_tokens = n;
        }
        // An engine's error event ends a stream that looks complete; it failed all the same.
        let event = self.sse.as_ref().and_then(|f| f.error_event.as_deref());
        let error = error.or_else(|| {
            event.map(|m| {
                (
                    "upstream_response",
                    format!("upstream sent an error event: {m}"),
                )
            })
        });
        // An upstream 4xx passed through unchanged is still an error of the request.
        let error = error.or_else(|| {
            (self.status >= 400).then(|| {
                (
                    "upstream_response",
                    format!("upstream answered {}", self.status),
                )
            })
        });
        let origin = match error.as_ref().map(|(k, _)| *k) {
            Some("client_disconnect") => "downstream",
            Some("drain_timeout") => "internal",
            _ => "upstream",
        };
        self.acct
            .finish(self.status, error, origin, self.output_tokens);
    }

    /// One upstream data chunk: the bytes to send the client now (`None`: nothing yet).
    fn on_data(&mut self, data: Bytes, at_end: bool) -> Option<Bytes> {
        if !data.is_empty() && !self.saw_first_byte {
            self.saw_first_byte = true;
            self.acct.first_byte();
        }
        let Some(f) = self.sse.as_mut() else {
            self.json.push(&data);
            return Some(data);
        };
        let told = f.output_tokens;
        let out = f.push(data);
        if f.output_tokens != told {
            // The usage chunk: the output rate limit charges it now.
            self.acct.usage(f.output_tokens);
        }
        if !at_end {
            return (!out.is_empty()).then_some(out);
        }
        let rest = f.flush();
        Some(if rest.is_empty() {
            out
        } else if out.is_empty() {
            rest
        } else {
            [out, rest].concat().into()
        })
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some((_, pause)) = this.pending_error.as_mut() {
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if let Some((e, _)) = this.pending_error.take() {
                return Poll::Ready(Some(Err(e)));
            }
        }
        if this.finished {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => {
                    // The listener polls a connection it cuts once more, for this event.
                    if this
                        .drain_cut
                        .as_ref()
                        .is_some_and(CancellationToken::is_cancelled)
                    {
                        return this.cut_by_drain();
                    }
                    let Some(idle) = this.idle.as_mut() else {
                        return Poll::Pending;
                    };
                    if !idle.expired(cx) {
                        return Poll::Pending;
                    }
                    let timeout = idle.timeout;
                    return this.fail(Box::new(crate::error::Error::UpstreamIdle { timeout }));
                }
                Poll::Ready(None) => {
                    let rest = this.sse.as_mut().map(SseFilter::flush).unwrap_or_default();
                    this.finish(None);
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return this.fail(Box::new(e)),
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(idle) = this.idle.as_mut() {
                        idle.last = Instant::now();
                    }
                    let at_end = this.inner.is_end_stream();
                    let frame = match frame.into_data() {
                        Ok(data) => match this.on_data(data, at_end) {
                            Some(out) => Frame::data(out),
                            None => continue,
                        },
                        Err(trailers) => {
                            // Trailers end a body, and hyper may drop it without polling
                            // again: settle now (it read as a client disconnect).
                            let rest = this.sse.as_mut().map(SseFilter::flush).unwrap_or_default();
                            this.finish(None);
                            if !rest.is_empty() {
                                // An unterminated last line goes out; the trailers after
                                // it do not (SSE clients do not read trailers).
                                return Poll::Ready(Some(Ok(Frame::data(rest))));
                            }
                            trailers
                        }
                    };
                    if at_end {
                        // Finish before the last bytes leave, so that a client that has the
                        // whole answer also sees it counted.
                        this.finish(None);
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished && self.pending_error.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.sse.is_some() {
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        if !self.finished && self.inner.is_end_stream() {
            self.finish(None);
        } else if !self.finished && self.drain_cut.as_ref().is_some_and(|c| c.is_cancelled()) {
            let e = crate::error::Error::DrainCut;
            self.finish(Some((e.finish_reason(), e.to_string())));
        } else if !self.finished {
            // The client went away mid-body: dropping `inner` closes the upstream connection,
            // which cancels the engine's work; the in-flight guard gives the slot back.
            self.finish(Some((
                "client_disconnect",
                "client closed the connection during the response".into(),
            )));
        }
    }
}

#[cfg(test)]
mod tests;
