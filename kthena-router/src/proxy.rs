//! The response side of the proxy: the streaming body that passes upstream bytes through as
//! they arrive, reads usage, hides the usage chunk the router asked for, turns a mid-stream
//! upstream failure into an error-terminated stream, and reports how the request ended to its
//! [`Accounting`] (end of body, upstream failure, or client disconnect).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;

use crate::accounting::Accounting;
use crate::openai::ResponseProbe;

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

/// Pause between the SSE error event and breaking the stream, so the event is flushed.
const ERROR_FLUSH_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Largest non-streaming response copy kept to read `usage` from, in bytes.
const MAX_USAGE_COPY: usize = 4 * 1024 * 1024;

/// The streaming response body.
#[derive(Debug)]
pub struct ProxyBody {
    inner: Incoming,
    acct: Accounting,
    saw_first_byte: bool,
    status: u16,
    sse: Option<SseFilter>,
    json_copy: BytesMut,
    output_tokens: u64,
    /// The upstream error to end the client stream with, and a short pause before it so
    /// that hyper flushes the error event written just before.
    pending_error: Option<(BoxError, Pin<Box<tokio::time::Sleep>>)>,
    /// The upstream idle timeout and its timer, reset by every upstream frame.
    idle: Option<(std::time::Duration, Pin<Box<tokio::time::Sleep>>)>,
    finished: bool,
}

impl ProxyBody {
    pub(crate) fn new(
        inner: Incoming,
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
            json_copy: BytesMut::new(),
            output_tokens: 0,
            pending_error: None,
            idle: None,
            finished: false,
        }
    }

    /// Ends the stream with an error when the engine sends nothing for `timeout` (`None`:
    /// waits as long as the client does).
    pub(crate) fn with_idle_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.idle = timeout.map(|t| (t, Box::pin(tokio::time::sleep(t))));
        self
    }

    /// Settles as an upstream transport failure and returns the frame to send: for SSE an
    /// error event (the error itself follows after a short pause), else the error.
    fn fail(&mut self, e: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let msg = format!("upstream stream failed: {e}");
        tracing::warn!(error = %e, "Upstream failed mid-stream; ending the client stream with an error");
        self.finish(Some(("upstream_transport", msg.clone())));
        self.idle = None;
        if self.sse.is_none() {
            return Poll::Ready(Some(Err(e)));
        }
        // Tell SSE clients why, then break the chunked stream so the client sees an
        // incomplete response, never a clean end.
        let body =
            crate::error::openai_error_body(&msg, "server_error", None, "upstream_stream_error");
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
            self.output_tokens = f.output_tokens;
        } else if error.is_none()
            && let Some(u) = ResponseProbe::parse(&self.json_copy).and_then(|p| p.usage())
        {
            self.output_tokens = u.completion_tokens;
        }
        // An upstream 4xx passed through unchanged is still an error of the request.
        let error = error.or_else(|| {
            (self.status >= 400).then(|| {
                (
                    "upstream_response",
                    format!("upstream answered {}", self.status),
                )
            })
        });
        let origin = if error
            .as_ref()
            .is_some_and(|(k, _)| *k == "client_disconnect")
        {
            "downstream"
        } else {
            "upstream"
        };
        self.acct
            .finish(self.status, error, origin, self.output_tokens);
    }
}

/// Line-based SSE pass-through: forwards complete lines as soon as they arrive, reads
/// `usage` from `data:` lines, notes `data: [DONE]`, and drops the usage-only chunk (empty
/// `choices`) when the router asked for usage on the client's behalf.
#[derive(Debug, Default)]
pub struct SseFilter {
    hide_usage_chunk: bool,
    line_buf: BytesMut,
    /// `usage.completion_tokens` of the last chunk that carried usage.
    pub output_tokens: u64,
    /// A `data: [DONE]` line was seen.
    pub saw_done: bool,
}

impl SseFilter {
    /// A filter; `hide_usage_chunk` drops the usage-only chunk.
    #[must_use]
    pub fn new(hide_usage_chunk: bool) -> Self {
        Self {
            hide_usage_chunk,
            ..Self::default()
        }
    }

    /// Feeds upstream bytes; returns the bytes to forward now (complete lines only).
    pub fn push(&mut self, data: &[u8]) -> Bytes {
        self.line_buf.extend_from_slice(data);
        let Some(last_nl) = self.line_buf.iter().rposition(|b| *b == b'\n') else {
            return Bytes::new();
        };
        let complete = self.line_buf.split_to(last_nl + 1).freeze();
        let mut out = BytesMut::with_capacity(complete.len());
        let mut skip_blank = false;
        for line in complete.split_inclusive(|b| *b == b'\n') {
            let text = trim_eol(line);
            if skip_blank && text.is_empty() {
                skip_blank = false;
                continue;
            }
            skip_blank = false;
            if let Some(payload) = text.strip_prefix(b"data:") {
                let payload = payload.trim_ascii();
                if payload == b"[DONE]" {
                    self.saw_done = true;
                } else if let Some(p) = ResponseProbe::parse(payload) {
                    if let Some(u) = p.usage() {
                        self.output_tokens = u.completion_tokens;
                    }
                    if self.hide_usage_chunk && p.usage_only() {
                        skip_blank = true;
                        continue;
                    }
                }
            }
            out.extend_from_slice(line);
        }
        out.freeze()
    }

    /// The incomplete last line, at the end of the stream.
    pub fn flush(&mut self) -> Bytes {
        self.line_buf.split().freeze()
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let l = line.strip_suffix(b"\n").unwrap_or(line);
    l.strip_suffix(b"\r").unwrap_or(l)
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
                    let Some((t, timer)) = this.idle.as_mut() else {
                        return Poll::Pending;
                    };
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let t = *t;
                    return this.fail(Box::new(crate::error::Error::UpstreamIdle { timeout: t }));
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
                    if let Some((t, timer)) = this.idle.as_mut() {
                        timer.as_mut().reset(tokio::time::Instant::now() + *t);
                    }
                    let at_end = this.inner.is_end_stream();
                    let frame = match frame.into_data() {
                        Ok(data) => {
                            if !data.is_empty() && !this.saw_first_byte {
                                this.saw_first_byte = true;
                                this.acct.first_byte();
                            }
                            if let Some(f) = this.sse.as_mut() {
                                let mut out = BytesMut::from(&f.push(&data)[..]);
                                if at_end {
                                    out.extend_from_slice(&f.flush());
                                }
                                if out.is_empty() && !at_end {
                                    continue;
                                }
                                Frame::data(out.freeze())
                            } else {
                                if this.json_copy.len() + data.len() <= MAX_USAGE_COPY {
                                    this.json_copy.extend_from_slice(&data);
                                }
                                Frame::data(data)
                            }
                        }
                        Err(frame) => frame,
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
mod tests {
    use super::*;

    #[test]
    fn sse_filter_hides_injected_usage_chunk() {
        let mut f = SseFilter::new(true);
        let a = f.push(b"data: {\"choices\":[{\"text\":\"hi\"}],\"usage\":null}\n\ndata: {\"cho");
        assert_eq!(
            &a[..],
            b"data: {\"choices\":[{\"text\":\"hi\"}],\"usage\":null}\n\n"
        );
        let b = f.push(b"ices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n");
        assert_eq!(&b[..], b"data: [DONE]\n\n");
        assert_eq!(f.output_tokens, 7);
        assert!(f.saw_done);
        assert!(f.flush().is_empty());

        let mut keep = SseFilter::new(false);
        let c = keep.push(b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n");
        assert_eq!(
            &c[..],
            b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
        );
        assert_eq!(keep.output_tokens, 2);
        assert!(keep.push(b"data: partial").is_empty());
        assert_eq!(&keep.flush()[..], b"data: partial");
    }

    #[test]
    fn trims_line_ends() {
        assert_eq!(trim_eol(b"data: x\r\n"), b"data: x");
        assert_eq!(trim_eol(b"data: x\n"), b"data: x");
        assert_eq!(trim_eol(b"x"), b"x");
    }
}
