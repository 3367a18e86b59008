//! Engine connections driven by the request that uses them, on the serving threads.
//!
//! hyper's pooled client (`hyper_util::client::legacy`) runs every engine connection as a
//! task of its own: the connection's task reads and decodes the engine's answer and hands
//! each body chunk to the client connection's task through a one-slot channel, so a
//! streamed answer of `n` SSE events costs `n` wake-ups and polls of each task (and of the
//! server side's dispatcher). Here the engine connection (`hyper::client::conn::http1`) is
//! owned by the request instead: the request future polls it while it waits for the answer
//! head, and the answer's body ([`UpBody`]) polls it before each read of the body. Every
//! chunk the engine sent in one read is then decoded and handed on in the same poll of the
//! one task that serves the client, and hyper's server writes them in one pass.
//!
//! Connections are kept per thread and per endpoint address ([`MAX_IDLE_PER_ENDPOINT`],
//! most recently used first) between requests, idle for at most [`IDLE_TIMEOUT`]; a request
//! takes an idle one or, when none is idle, opens one at once (no request waits behind
//! another stream). An idle connection the engine closed is noticed when it is next taken
//! (and every [`SWEEP_EVERY`]) and dropped; a request sent on a kept connection that turns
//! out closed before anything was written is sent again on a new one. New connections
//! have `TCP_NODELAY` and a [`CONNECT_TIMEOUT`].
//!
//! Only the serving threads (current-thread runtimes, see `serving`) keep such connections
//! ([`enable_on_this_thread`]): a task there never moves to another thread, so the
//! connection it holds is polled by the thread whose I/O driver owns its socket. Elsewhere
//! (tests, in-memory runs, a multi-thread runtime) requests use the pooled client.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::ReqBody;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long opening an engine connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an engine connection is kept idle before it is closed.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per thread and endpoint address: the default
/// `overload.maxInFlightPerEndpoint`, so that a burst of that many concurrent streams finds
/// its connections open the next time.
pub(crate) const MAX_IDLE_PER_ENDPOINT: usize = 1024;

/// How often each serving thread drops the idle connections that expired or were closed.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

type Sender = http1::SendRequest<ReqBody>;
/// Boxed once when opened: the connection's state is some hundred bytes, and the request
/// future, the answer's body and the pool move it by pointer.
type Connection = Box<http1::Connection<TokioIo<TcpStream>, ReqBody>>;

/// Why a request could not be sent on an engine connection, or no answer head came.
/// Messages read as those of hyper's pooled client (`tcp connect error: Connection refused
/// (os error 111)`), so logs and error answers do not depend on the path taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// The TCP connection could not be opened (refused, unreachable, timed out after
    /// [`CONNECT_TIMEOUT`]).
    #[error("tcp connect error")]
    Connect(#[source] std::io::Error),
    /// The connection failed before or while the answer head came (reset, closed, bad
    /// head), or the HTTP/1.1 handshake failed.
    #[error(transparent)]
    Http(hyper::Error),
    /// The pooled client's error (the path used off the serving threads).
    #[error(transparent)]
    Pooled(hyper_util::client::legacy::Error),
    /// The request could not be built (an invalid URL).
    #[error("invalid upstream request")]
    Request(#[source] http::Error),
    /// No TLS client for an external URL.
    #[error(transparent)]
    Tls(#[from] crate::upstream::tls::TlsError),
}

/// A kept connection: its request handle, the connection itself and since when it idles.
struct Idle {
    sender: Sender,
    conn: Connection,
    since: Instant,
}

impl Idle {
    /// Whether the connection can carry a request now: not idle past [`IDLE_TIMEOUT`],
    /// not closed by the engine (one poll reads a pending end of stream), ready to send.
    fn usable(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.since) >= IDLE_TIMEOUT {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(&mut self.conn).poll(&mut cx).is_pending() && self.sender.is_ready()
    }
}

/// One thread's kept connections, by endpoint address, most recently used last.
#[derive(Default)]
struct Pool {
    idle: HashMap<SocketAddr, Vec<Idle>>,
}

thread_local! {
    /// The kept connections of the serving thread this runs on (`None` elsewhere).
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
}

/// Makes the current thread keep engine connections (call once per serving thread, and
/// run [`sweep_idle`] beside its work).
pub(crate) fn enable_on_this_thread() {
    POOL.with_borrow_mut(|p| *p = Some(Pool::default()));
}

/// Drops this thread's idle connections that expired or were closed by the engine every
/// [`SWEEP_EVERY`], for ever (run it beside the thread's work, on its runtime).
pub(crate) async fn sweep_idle() {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        sweep(Instant::now());
    }
}

/// Closes this thread's kept connections and stops keeping any; call before the thread's
/// runtime shuts down, so that the sockets leave while their I/O driver still runs.
pub(crate) fn disable_on_this_thread() {
    let pool = POOL.with_borrow_mut(Option::take);
    drop(pool);
}

/// Whether requests made on this thread use its kept connections ([`send`]).
pub(crate) fn enabled() -> bool {
    POOL.with_borrow(Option::is_some)
}

/// Idle connections this thread keeps to `addr` (0 off the serving threads).
#[cfg(test)]
fn idle_count(addr: SocketAddr) -> usize {
    POOL.with_borrow(|p| {
        p.as_ref()
            .map_or(0, |p| p.idle.get(&addr).map_or(0, Vec::len))
    })
}

/// Drops the idle connections that expired or were closed by the engine.
fn sweep(now: Instant) {
    POOL.with_borrow_mut(|p| {
        if let Some(p) = p.as_mut() {
            p.idle.retain(|_, list| {
                list.retain_mut(|i| i.usable(now));
                !list.is_empty()
            });
        }
    });
}

/// A usable idle connection to `addr`, the most recently used first.
fn checkout(addr: SocketAddr) -> Option<Idle> {
    let now = Instant::now();
    POOL.with_borrow_mut(|p| {
        let list = p.as_mut()?.idle.get_mut(&addr)?;
        while let Some(mut i) = list.pop() {
            if i.usable(now) {
                return Some(i);
            }
        }
        None
    })
}

/// Keeps a connection whose last answer ended, if this thread keeps connections and the
/// endpoint has fewer than [`MAX_IDLE_PER_ENDPOINT`] idle.
fn checkin(addr: SocketAddr, sender: Sender, conn: Connection) {
    // `try_with`: a body dropped while the thread ends finds no pool, and closes.
    let _ = POOL.try_with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            let list = p.idle.entry(addr).or_default();
            if list.len() < MAX_IDLE_PER_ENDPOINT {
                list.push(Idle {
                    sender,
                    conn,
                    since: Instant::now(),
                });
            }
        }
    });
}

/// Sends `req` (origin-form target, `Host` set) to the engine at `addr` on a kept
/// connection or a new one, and returns the answer head with a body that drives the
/// connection (see the module docs).
///
/// # Errors
/// [`SendError::Connect`] when no connection could be opened, [`SendError::Http`] when
/// the connection failed before the answer head (a kept connection found closed before
/// anything was written is replaced once, transparently).
pub(crate) async fn send(
    addr: SocketAddr,
    mut req: Request<ReqBody>,
) -> Result<Response<UpBody>, SendError> {
    let mut kept = checkout(addr);
    loop {
        let reused = kept.is_some();
        let (sender, conn) = match kept.take() {
            Some(i) => (i.sender, i.conn),
            None => connect(addr).await?,
        };
        match exchange(addr, sender, conn, req).await {
            Ok(resp) => return Ok(resp),
            Err((e, Some(back))) if reused => {
                tracing::debug!(%addr, error = %e, "Kept engine connection was closed; sending on a new one");
                req = back;
            }
            Err((e, _)) => return Err(SendError::Http(e)),
        }
    }
}

/// Opens a connection to `addr` (`TCP_NODELAY`, [`CONNECT_TIMEOUT`]).
async fn connect(addr: SocketAddr) -> Result<(Sender, Connection), SendError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            SendError::Connect(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "deadline has elapsed",
            ))
        })?
        .map_err(SendError::Connect)?;
    if let Err(e) = stream.set_nodelay(true) {
        // As hyper's pooled client: the connection works, only slower for small writes.
        tracing::warn!(%addr, error = %e, "Cannot set TCP_NODELAY on an engine connection");
    }
    let (sender, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(SendError::Http)?;
    Ok((sender, Box::new(conn)))
}

/// Sends `req` on one connection, polling the connection until the answer head came.
/// On failure, the request comes back when nothing of it was written.
async fn exchange(
    addr: SocketAddr,
    mut sender: Sender,
    conn: Connection,
    req: Request<ReqBody>,
) -> Result<Response<UpBody>, (hyper::Error, Option<Request<ReqBody>>)> {
    let mut answer = pin!(sender.try_send_request(req));
    let mut conn = Some(conn);
    let res = poll_fn(|cx| {
        if let Some(c) = conn.as_mut()
            && Pin::new(c).poll(cx).is_ready()
        {
            // The connection ended. Dropping it answers a request it still holds (an
            // engine's clean close read before the request was taken leaves it queued,
            // and only the drop gives it back, unsent); the answer future then resolves.
            conn = None;
        }
        answer.as_mut().poll(cx)
    })
    .await;
    match res {
        Ok(resp) => {
            let driver = Driver { addr, sender, conn };
            Ok(resp.map(|incoming| UpBody {
                incoming,
                driver: Some(driver),
                ahead: None,
            }))
        }
        Err(mut e) => {
            let back = e.take_message();
            Err((e.into_error(), back))
        }
    }
}

/// The connection an answer's body drives, and where it goes back when the answer ended.
struct Driver {
    addr: SocketAddr,
    sender: Sender,
    /// `None` once the connection ended.
    conn: Option<Connection>,
}

impl Driver {
    /// Lets the connection read and decode what the engine sent (registers the wake-up).
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(c) = self.conn.as_mut()
            && Pin::new(c).poll(cx).is_ready()
        {
            self.conn = None;
        }
    }

    /// The answer ended: one more turn lets the connection finish the message and go idle,
    /// then it is kept for the next request (or closed when it cannot carry one).
    fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let mut cx = Context::from_waker(Waker::noop());
        if Pin::new(&mut conn).poll(&mut cx).is_pending() && self.sender.is_ready() {
            checkin(self.addr, self.sender, conn);
        }
    }
}

/// An engine answer's body: hyper's [`Incoming`], and, on a serving thread, the connection
/// that feeds it (polled before each read of the body; kept for the next request when the
/// body ended, closed when it is dropped before its end, which tells the engine to stop).
pub(crate) struct UpBody {
    incoming: Incoming,
    driver: Option<Driver>,
    /// A poll's result read ahead by [`UpBody::wait_first_frame`], returned by the next poll.
    ahead: Option<Option<Result<Frame<Bytes>, hyper::Error>>>,
}

impl std::fmt::Debug for UpBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpBody")
            .field("incoming", &self.incoming)
            .field("driven", &self.driver.is_some())
            .finish()
    }
}

impl From<Incoming> for UpBody {
    /// A body whose connection runs on its own (the pooled client's).
    fn from(incoming: Incoming) -> Self {
        Self {
            incoming,
            driver: None,
            ahead: None,
        }
    }
}

impl UpBody {
    fn release(&mut self) {
        if let Some(d) = self.driver.take() {
            d.release();
        }
    }

    /// Waits up to `timeout` for the body's first frame (or its end, or an error), which the
    /// next poll then returns; false when nothing came in time (an engine that hung after its
    /// headers).
    pub(crate) async fn wait_first_frame(&mut self, timeout: Duration) -> bool {
        if self.ahead.is_some() {
            return true;
        }
        let next = poll_fn(|cx| Pin::new(&mut *self).poll_frame(cx));
        match tokio::time::timeout(timeout, next).await {
            Ok(r) => {
                self.ahead = Some(r);
                true
            }
            Err(_) => false,
        }
    }
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(r) = this.ahead.take() {
            return Poll::Ready(r);
        }
        if let Some(d) = this.driver.as_mut() {
            d.drive(cx);
        }
        let r = Pin::new(&mut this.incoming).poll_frame(cx);
        match &r {
            Poll::Ready(None) => this.release(),
            // Trailers end a chunked body (hyper's server polls no further after them).
            Poll::Ready(Some(Ok(f))) if f.is_trailers() || this.incoming.is_end_stream() => {
                this.release();
            }
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        match &self.ahead {
            Some(r) => r.is_none(),
            None => self.incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.incoming.size_hint();
        let ahead = match &self.ahead {
            None => return rest,
            Some(None) => return SizeHint::with_exact(0),
            Some(Some(Ok(f))) => f.data_ref().map_or(0, |d| d.len() as u64),
            Some(Some(Err(_))) => 0,
        };
        // The frame read ahead is still to come.
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + ahead);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + ahead);
        }
        hint
    }
}

impl Drop for UpBody {
    fn drop(&mut self) {
        // A body read to its end (trailers, or all of a sized body) can still go back.
        if self.incoming.is_end_stream() {
            self.release();
        }
    }
}

#[cfg(test)]
mod tests;
