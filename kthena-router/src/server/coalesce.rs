//! Write coalescing for client connections: a write is held back for one turn of the
//! runtime's scheduler, and for one more each time the data waiting to be written grew in
//! the meantime, so that the SSE events an engine sent together leave in one `writev`
//! instead of one system call (and one wake-up of the client) per event.
//!
//! Why it pays: a burst of events can reach the body over more than one poll (off the
//! serving threads hyper's pooled client hands a proxied body over one upstream chunk at a
//! time, its connection task decoding a chunk and the server connection's task writing it;
//! on them the engine's next segment may come in while the first is written), so the
//! events would otherwise be written one by one. While a write is held back, hyper keeps
//! queueing the body's next chunks behind it (up to its own limit of queued buffers), and
//! the held write then carries them all. Measured with the engine connection driven by
//! the request (`upstream`), not holding on the serving threads took the same CPU per
//! request and added 3-20 µs to the median streamed request, so writes there are still held.
//!
//! What it costs: a write waits for one scheduler turn (the other tasks that are ready run
//! first; microseconds), and never longer than [`MAX_HOLDS`] turns or past
//! [`MAX_HELD_BYTES`]; once let go, its retries (a socket that took part of it or was full)
//! are not held again. A lone event (an engine that streams tokens milliseconds apart) is
//! written after one turn, as soon as nothing more is queued behind it.
//!
//! It pays on HTTP/1.1, where hyper queues up to 16 body chunks behind a pending write; on
//! HTTP/2, h2 buffers one DATA frame over 256 bytes at a time, so there mostly small frames
//! are combined.
//!
//! How a turn is taken depends on the runtime. On a current-thread runtime (the serving
//! threads) the task wakes itself: it goes to the back of the run queue, behind the tasks
//! that are ready (the engine connection that is decoding the next chunk), and when nothing
//! else is ready it runs again at once. `tokio::task::yield_now` would instead wait for the
//! next poll of the I/O driver, one more `epoll_wait` per held write and so per streamed
//! request. On a multi-thread runtime a task that wakes itself runs next (Tokio's LIFO slot),
//! which would hold nothing, so there the hold yields with `yield_now`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Scheduler turns a write is held back at most.
pub(crate) const MAX_HOLDS: u8 = 16;

/// Bytes waiting to be written beyond which a write is no longer held back.
pub(crate) const MAX_HELD_BYTES: usize = 64 * 1024;

/// The coalescing state of one connection's writes (see the module doc): the stream calls
/// [`Hold::poll`] before each write and writes only when it is `Ready`.
pub(crate) struct Hold {
    /// How a turn is taken on the runtime the connection runs on.
    how: Turn,
    /// The turn a held write waits for, if one is taken.
    turn: Option<Taken>,
    /// Bytes offered by the held write when its turn was taken.
    offered: usize,
    /// Turns taken for the current write.
    holds: u8,
    /// The current write was let go: its retries (the socket took part of it, or was
    /// full) go straight to the socket until it is written in full ([`Hold::written`]).
    released: bool,
}

/// A turn in progress.
enum Taken {
    /// The task woke itself ([`Turn::SelfWake`]): its next poll ends the turn.
    Woken,
    /// The pending `yield_now` ([`Turn::Yield`]).
    Yielding(Pin<Box<dyn Future<Output = ()> + Send>>),
}

/// How [`Hold`] gives the other ready tasks a turn (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Wake the task and return `Pending` (current-thread runtime).
    SelfWake,
    /// `tokio::task::yield_now` (multi-thread runtime, or outside a runtime).
    Yield,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("how", &self.how)
            .field("held", &self.turn.is_some())
            .field("offered", &self.offered)
            .field("holds", &self.holds)
            .field("released", &self.released)
            .finish()
    }
}

impl Hold {
    /// The state for a connection served on the current runtime (its flavour picks how a
    /// turn is taken).
    pub(crate) fn new() -> Self {
        let current = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        Self {
            how: if current { Turn::SelfWake } else { Turn::Yield },
            turn: None,
            offered: 0,
            holds: 0,
            released: false,
        }
    }

    /// `Ready` when a write of `offered` bytes may go out now; `Pending` while it is held
    /// back (the task is woken after a scheduler turn).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, offered: usize) -> Poll<()> {
        if self.released {
            return Poll::Ready(());
        }
        loop {
            if self.turn_pending(cx) {
                return Poll::Pending;
            }
            if self.holds > 0 && offered <= self.offered {
                // Nothing was queued behind it during the turn: write now.
                return self.release();
            }
            if self.holds >= MAX_HOLDS || offered >= MAX_HELD_BYTES {
                return self.release();
            }
            self.holds += 1;
            self.offered = offered;
            match self.how {
                Turn::SelfWake => {
                    self.turn = Some(Taken::Woken);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Turn::Yield => {
                    self.turn = Some(Taken::Yielding(Box::pin(tokio::task::yield_now())));
                }
            }
        }
    }

    /// Whether the turn taken for the held write is still to come.
    fn turn_pending(&mut self, cx: &mut Context<'_>) -> bool {
        match self.turn.as_mut() {
            None => return false,
            // Polled again after waking itself: the ready tasks queued before it ran.
            Some(Taken::Woken) => {}
            Some(Taken::Yielding(y)) => {
                if y.as_mut().poll(cx).is_pending() {
                    return true;
                }
            }
        }
        self.turn = None;
        false
    }

    fn release(&mut self) -> Poll<()> {
        self.holds = 0;
        self.offered = 0;
        self.released = true;
        Poll::Ready(())
    }

    /// The socket took `n` of the `offered` bytes of a released write: the next write is
    /// held again only once this one went out in full.
    pub(crate) fn written(&mut self, n: usize, offered: usize) {
        if n >= offered {
            self.released = false;
        }
    }
}

#[cfg(test)]
mod tests;
