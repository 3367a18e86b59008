//! Write coalescing for client connections: a write is held back for one turn of the
//! runtime's scheduler, and for one more each time the data waiting to be written grew in
//! the meantime, so that the SSE events an engine sent together leave in one `writev`
//! instead of one system call (and one wake-up of the client) per event.
//!
//! Why it pays: hyper hands a proxied body over one upstream chunk at a time (the client
//! connection's task decodes a chunk, the server connection's task writes it), so a burst
//! of events that arrived in one upstream read would otherwise be written one by one. While
//! a write is held back, hyper keeps queueing the body's next chunks behind it (up to its
//! own limit of queued buffers), and the held write then carries them all.
//!
//! What it costs: a write waits for one scheduler turn (the other tasks that are ready run
//! first; microseconds), and never longer than [`MAX_HOLDS`] turns or past
//! [`MAX_HELD_BYTES`]. A lone event (an engine that streams tokens milliseconds apart) is
//! written after one turn, as soon as nothing more is queued behind it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Scheduler turns a write is held back at most.
pub(crate) const MAX_HOLDS: u8 = 16;

/// Bytes waiting to be written beyond which a write is no longer held back.
pub(crate) const MAX_HELD_BYTES: usize = 64 * 1024;

/// An I/O stream whose writes are coalesced (see the module doc).
pub(crate) struct Coalesced<T> {
    inner: T,
    /// The pending scheduler turn, while a write is held back.
    turn: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Bytes offered by the held write when its turn was taken.
    offered: usize,
    /// Turns taken for the current write.
    holds: u8,
}

impl<T> std::fmt::Debug for Coalesced<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalesced")
            .field("held", &self.turn.is_some())
            .field("offered", &self.offered)
            .field("holds", &self.holds)
            .finish_non_exhaustive()
    }
}

impl<T> Coalesced<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            turn: None,
            offered: 0,
            holds: 0,
        }
    }

    /// `Ready` when a write of `offered` bytes may go out now; `Pending` while it is held
    /// back (the task is woken after a scheduler turn).
    fn hold(&mut self, cx: &mut Context<'_>, offered: usize) -> Poll<()> {
        loop {
            if let Some(turn) = self.turn.as_mut() {
                if turn.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.turn = None;
                if offered <= self.offered {
                    // Nothing was queued behind it during the turn: write now.
                    return self.release();
                }
            }
            if self.holds >= MAX_HOLDS || offered >= MAX_HELD_BYTES {
                return self.release();
            }
            self.holds += 1;
            self.offered = offered;
            self.turn = Some(Box::pin(tokio::task::yield_now()));
        }
    }

    fn release(&mut self) -> Poll<()> {
        self.holds = 0;
        self.offered = 0;
        Poll::Ready(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.hold(cx, buf.len()));
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let offered = bufs.iter().map(|b| b.len()).sum();
        std::task::ready!(self.hold(cx, offered));
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::io::IoSlice;

    use super::*;

    /// A sink that records every vectored write it is given (its bytes, in one piece).
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.0
                .push(bufs.iter().flat_map(|b| b.iter().copied()).collect());
            Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// One poll of a vectored write of `bufs`.
    async fn offer(c: &mut Coalesced<Writes>, bufs: &[&[u8]]) -> Poll<usize> {
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        poll_fn(|cx| {
            Poll::Ready(
                Pin::new(&mut *c)
                    .poll_write_vectored(cx, &slices)
                    .map(|r| r.unwrap()),
            )
        })
        .await
    }

    #[tokio::test]
    async fn events_queued_during_the_turn_leave_in_one_write() {
        let mut c = Coalesced::new(Writes::default());
        assert!(offer(&mut c, &[b"data: 1\n\n"]).await.is_pending());
        tokio::task::yield_now().await;
        // Another event was queued behind it meanwhile: held for one more turn.
        assert!(
            offer(&mut c, &[b"data: 1\n\n", b"data: 2\n\n"])
                .await
                .is_pending()
        );
        tokio::task::yield_now().await;
        let n = offer(&mut c, &[b"data: 1\n\n", b"data: 2\n\n"]).await;
        assert_eq!(n, Poll::Ready(18));
        assert_eq!(c.inner.0, vec![b"data: 1\n\ndata: 2\n\n".to_vec()]);
        // The next write starts a new hold.
        assert!(offer(&mut c, &[b"data: 3\n\n"]).await.is_pending());
    }

    #[tokio::test]
    async fn a_lone_event_goes_out_after_one_turn() {
        let mut c = Coalesced::new(Writes::default());
        assert!(offer(&mut c, &[b"data: 1\n\n"]).await.is_pending());
        tokio::task::yield_now().await;
        assert_eq!(offer(&mut c, &[b"data: 1\n\n"]).await, Poll::Ready(9));
        assert_eq!(c.inner.0.len(), 1);
    }

    #[tokio::test]
    async fn a_write_is_held_at_most_max_holds_turns_or_max_held_bytes() {
        let mut c = Coalesced::new(Writes::default());
        let ev = [b'x'; 10];
        let mut bufs: Vec<&[u8]> = vec![&ev];
        let mut held = 0;
        while offer(&mut c, &bufs).await.is_pending() {
            held += 1;
            tokio::task::yield_now().await;
            bufs.push(&ev);
        }
        assert_eq!(held, usize::from(MAX_HOLDS));
        assert_eq!(c.inner.0.len(), 1);
        let big = vec![0u8; MAX_HELD_BYTES];
        assert_eq!(
            offer(&mut c, &[&big]).await,
            Poll::Ready(MAX_HELD_BYTES),
            "a full buffer is written at once"
        );
    }
}
