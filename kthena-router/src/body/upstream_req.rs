//! The body of every upstream request ([`ReqBody`]): bytes the router holds, then, for a
//! multipart upload whose file streams, the rest of the client body ([`Tail`]), taken only
//! when the engine connection asks for it past the held bytes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::BoxError;
use super::tail::{Tail, TailError, TailReader};

/// An upstream request body: `head` (held bytes, sent again by each attempt) and an
/// optional client tail after it (sent once).
#[derive(Debug, Default)]
pub struct ReqBody {
    head: Option<Bytes>,
    tail: Option<TailState>,
}

enum TailState {
    /// Not asked for yet: another attempt may still send it.
    Waiting(Tail),
    /// Taken from the client body and being sent.
    Reading(TailReader),
}

impl std::fmt::Debug for TailState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Waiting(t) => f.debug_tuple("Waiting").field(t).finish(),
            Self::Reading(_) => f.write_str("Reading"),
        }
    }
}

impl ReqBody {
    /// `head`, then `tail` when given.
    pub(crate) fn new(head: Bytes, tail: Option<Tail>) -> Self {
        Self {
            head: Some(head),
            tail: tail.map(TailState::Waiting),
        }
    }
}

impl From<Bytes> for ReqBody {
    fn from(b: Bytes) -> Self {
        Self::new(b, None)
    }
}

impl Body for ReqBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(h) = this.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(h))));
        }
        if let Some(TailState::Waiting(t)) = &this.tail {
            match t.take() {
                Some(r) => this.tail = Some(TailState::Reading(r)),
                None => {
                    this.tail = None;
                    return Poll::Ready(Some(Err(Box::new(TailError::Taken))));
                }
            }
        }
        match &mut this.tail {
            Some(TailState::Reading(r)) => Pin::new(r).poll_frame(cx),
            _ => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        let head_done = self.head.as_ref().is_none_or(Bytes::is_empty);
        head_done
            && match &self.tail {
                None => true,
                Some(TailState::Waiting(t)) => t.size_hint().exact() == Some(0),
                Some(TailState::Reading(r)) => r.is_end_stream(),
            }
    }

    fn size_hint(&self) -> SizeHint {
        let head = self.head.as_ref().map_or(0, |h| h.len() as u64);
        let mut hint = match &self.tail {
            None => SizeHint::with_exact(0),
            Some(TailState::Waiting(t)) => t.size_hint(),
            Some(TailState::Reading(r)) => r.size_hint(),
        };
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + head);
        }
        hint.set_lower(hint.lower() + head);
        hint
    }
}

#[cfg(test)]
mod tests;
