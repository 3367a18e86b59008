//! Slow-client protection for the router's listeners: the accept loop with a cap on open
//! connections (per listener, and one budget of all listeners from the open-files limit),
//! TCP keepalive, the request-head timeout, and the metrics that count what was cut.
//!
//! The request-head timeout is hyper's `http1::Builder::header_read_timeout` (it runs while
//! hyper waits for a request head, so it also closes an idle keep-alive connection, as Go's
//! `net/http` does when only `ReadHeaderTimeout` is set). Before the first request of a
//! connection, hyper-util's HTTP/1-or-HTTP/2 detection has no timeout of its own, so the
//! connection's first request must also reach the router within the same time. Body read
//! timeouts are applied where the body is read (`body::read_body`, the one reader of every
//! path with a body), so that the client gets a 408 and the request an access-log line.
//!
//! | family | type | labels | meaning |
//! |---|---|---|---|
//! | `kthena_router_client_timeouts_total` | counter | `listener`, `phase` | connections or requests cut by a read timeout: `headers` (part of a request head arrived), `idle` (no byte of a request arrived: a new or kept-alive connection), `body` (the request body stalled or took too long; answered 408) |
//! | `kthena_router_downstream_connections` | gauge | `listener` | client connections open |
//! | `kthena_router_downstream_connection_limit_reached_total` | counter | `listener` | times the listener stopped accepting because `maxConnections` were open |
//! | `kthena_router_buffered_request_body_bytes` | gauge | | bytes of request bodies held, all connections together (`maxBufferedBodyBytes`) |

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::body::RespBody;
use crate::server::coalesce::Hold;

/// Listen backlog when `/proc/sys/net/core/somaxconn` cannot be read (Linux's default since
/// 5.4).
const DEFAULT_BACKLOG: u32 = 4096;

/// How long a connection cut after the drain timeout is still driven, so a response still
/// streaming can send its error event (`ProxyBody`) before the socket closes.
const CUT_GRACE: Duration = Duration::from_millis(100);

/// The listen backlog: the kernel's `net.core.somaxconn`, as Go's `net` package uses
/// (`maxListenerBacklog`), capped to 65,535. Tokio's `TcpListener::bind` uses 1,024, which
/// a burst of new clients overflows: the kernel then falls back to SYN cookies and resets
/// the connections whose cookies fail.
fn listen_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
        .map_or(DEFAULT_BACKLOG, |n| n.min(u32::from(u16::MAX)))
}

/// Binds a listening TCP socket on `addr` with `SO_REUSEADDR` (as Go's listeners) and the
/// kernel's full listen backlog ([`listen_backlog`]).
///
/// # Errors
/// The socket, bind or listen error (address in use, permission denied).
pub(crate) fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(listen_backlog())
}

/// The `listener:` section: read timeouts, the connection cap and TCP keepalive of every
/// listener (inference, metrics, debug; each has its own cap). Read at start only.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ListenerConfig {
    /// Longest wait for a complete request head, and for the first byte of the next request
    /// on a kept-alive connection (default `60s`, nginx's `client_header_timeout`; flag
    /// `--header-read-timeout`). The connection is closed when it expires.
    #[serde(with = "crate::config::duration::go_duration")]
    pub header_read_timeout: Duration,
    /// Longest wait between two reads of a request body (default `60s`, nginx's
    /// `client_body_timeout`; flag `--body-read-idle-timeout`). Answered 408.
    #[serde(with = "crate::config::duration::go_duration")]
    pub body_read_idle_timeout: Duration,
    /// Longest time to read a whole request body (default `5m`, Envoy's `stream_idle_timeout`
    /// default; flag `--body-read-timeout`). Answered 408.
    #[serde(with = "crate::config::duration::go_duration")]
    pub body_read_timeout: Duration,
    /// Most client connections open at once on each listener (default 10000; flag
    /// `--max-connections`). At the cap the listener stops accepting: new connections wait
    /// in the kernel's accept queue until one closes (as Go's `netutil.LimitListener` and
    /// nginx at `worker_connections` do). All listeners also share one budget derived from
    /// the open-files limit ([`ConnBudget`]).
    pub max_connections: usize,
    /// TCP keepalive idle time and probe interval of client connections; 9 probes
    /// (default `15s`, the Go runtime's default and so Go Kthena's; `0s` disables; flag
    /// `--tcp-keepalive`).
    #[serde(with = "crate::config::duration::go_duration")]
    pub tcp_keepalive: Duration,
    /// Most bytes of request bodies held at once, all connections of all listeners
    /// together (default: a quarter of the container's memory limit, or 256 MiB without
    /// one, and never below `maxBodyBytes`). A body whose
    /// next bytes would pass it is answered 503 `request_buffer_full` with `Retry-After: 1`.
    pub max_buffered_body_bytes: Option<usize>,
}

impl Default for ListenerConfig {
    /// 60 s head, 60 s body idle, 5 min body total, 10000 connections, 15 s keepalive, the
    /// body budget derived from the memory limit.
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(60),
            body_read_idle_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(300),
            max_connections: 10_000,
            tcp_keepalive: Duration::from_secs(15),
            max_buffered_body_bytes: None,
        }
    }
}

impl ListenerConfig {
    /// Checks the values: timeouts above zero, at least one connection.
    ///
    /// # Errors
    /// The field path and the reason.
    pub(crate) fn validate(&self) -> Result<(), String> {
        for (name, d) in [
            ("headerReadTimeout", self.header_read_timeout),
            ("bodyReadIdleTimeout", self.body_read_idle_timeout),
            ("bodyReadTimeout", self.body_read_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("listener.{name}: must be greater than 0"));
            }
        }
        if self.max_connections == 0 {
            return Err("listener.maxConnections: must be at least 1".into());
        }
        if self.max_buffered_body_bytes == Some(0) {
            return Err("listener.maxBufferedBodyBytes: must be at least 1".into());
        }
        Ok(())
    }
}

mod budget;

pub(crate) use budget::ConnBudget;

/// TCP keepalive probes before the kernel gives a silent peer up (Go's default count).
const KEEPALIVE_PROBES: u32 = 9;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    listener: String,
    phase: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerLabel {
    listener: String,
}

/// The listener families (see the module table), registered by [`Metrics`](crate::Metrics).
#[derive(Debug, Clone, Default)]
pub struct ListenerMetrics {
    timeouts: Family<PhaseLabels, Counter>,
    connections: Family<ListenerLabel, Gauge>,
    limit_reached: Family<ListenerLabel, Counter>,
    buffered_body_bytes: Gauge,
}

impl ListenerMetrics {
    /// Creates the families and registers them.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kthena_router_client_timeouts",
            "Client connections or requests cut by a read timeout, by phase (headers, idle, body)",
            m.timeouts.clone(),
        );
        registry.register(
            "kthena_router_downstream_connections",
            "Client connections open, per listener",
            m.connections.clone(),
        );
        registry.register(
            "kthena_router_downstream_connection_limit_reached",
            "Times a listener stopped accepting because maxConnections were open",
            m.limit_reached.clone(),
        );
        registry.register(
            "kthena_router_buffered_request_body_bytes",
            "Bytes of request bodies the router holds, all connections together",
            m.buffered_body_bytes.clone(),
        );
        m
    }

    /// `kthena_router_buffered_request_body_bytes`, the body budget's use.
    pub(crate) fn buffered_body_bytes(&self) -> Gauge {
        self.buffered_body_bytes.clone()
    }

    /// `kthena_router_client_timeouts_total{listener, phase}` +1.
    pub(crate) fn timeout(&self, listener: &str, phase: &str) {
        self.timeouts
            .get_or_create(&PhaseLabels {
                listener: listener.into(),
                phase: phase.into(),
            })
            .inc();
    }

    fn connections(&self, listener: &str, delta: i64) {
        self.connections
            .get_or_create(&ListenerLabel {
                listener: listener.into(),
            })
            .inc_by(delta);
    }

    fn limit_reached(&self, listener: &str) {
        self.limit_reached
            .get_or_create(&ListenerLabel {
                listener: listener.into(),
            })
            .inc();
    }
}

/// One listener to serve: its name (the `listener` label), settings and metrics.
#[derive(Debug, Clone)]
pub(crate) struct Listener {
    pub(crate) name: &'static str,
    pub(crate) cfg: ListenerConfig,
    pub(crate) metrics: ListenerMetrics,
    pub(crate) drain: Duration,
    /// Cancelled when an inference listener's drain time ran out; every listener then
    /// closes its remaining connections (see `serve`).
    pub(crate) cut: CancellationToken,
    /// The threads its connections are served on (`None`: the accepting runtime).
    pub(crate) serving: Option<Arc<crate::server::serving::ServingThreads>>,
    /// The router's own inference listener: when its drain time runs out (shutdown), every
    /// listener's connections are closed. Any other listener (metrics, debug, a Gateway
    /// port closed on its own) then closes only its own.
    pub(crate) cuts_all: bool,
    /// The connection slots of all listeners together.
    pub(crate) budget: ConnBudget,
    /// An inference listener: it may use the whole budget, the others a tenth.
    pub(crate) inference: bool,
    /// HTTPS: each connection's TLS handshake first, within the header read timeout.
    pub(crate) tls: Option<crate::server::tls::Https>,
}

/// Where a listener's connections come from: a TCP socket, or an in-memory network's
/// listener (`Router::start_in_memory`).
pub(crate) trait Accept: Send + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection.
    fn accept(&mut self) -> impl std::future::Future<Output = io::Result<Self::Io>> + Send;
    /// Applies the socket options (`TCP_NODELAY`, keepalive) to a new connection.
    fn prepare(_io: &Self::Io, _keepalive: Duration) {}
    /// A connection as it can move to another runtime: released from the accepting
    /// runtime's I/O driver.
    type Portable: Send + 'static;
    /// Releases `io` from the accepting runtime.
    ///
    /// # Errors
    /// The socket could not be released (it is closed then).
    fn detach(io: Self::Io) -> io::Result<Self::Portable>;
    /// Registers a released connection with the runtime this is called on.
    ///
    /// # Errors
    /// The runtime's I/O driver refused the socket (it is closed then).
    fn attach(p: Self::Portable) -> io::Result<Self::Io>;
}

impl Accept for TcpListener {
    type Io = TcpStream;

    async fn accept(&mut self) -> io::Result<TcpStream> {
        Self::accept(self).await.map(|(s, _)| s)
    }

    fn prepare(io: &TcpStream, keepalive: Duration) {
        set_socket_options(io, keepalive);
    }

    type Portable = std::net::TcpStream;

    fn detach(io: TcpStream) -> io::Result<std::net::TcpStream> {
        // Stays non-blocking, as `TcpStream::from_std` needs.
        io.into_std()
    }

    fn attach(p: std::net::TcpStream) -> io::Result<TcpStream> {
        TcpStream::from_std(p)
    }
}

impl Accept for kthena_memnet::MemListener {
    type Io = tokio::io::DuplexStream;

    async fn accept(&mut self) -> io::Result<tokio::io::DuplexStream> {
        match Self::accept(self).await {
            Some(s) => Ok(s),
            // Only after the listener was unregistered; the loop then waits for `cancel`.
            None => std::future::pending().await,
        }
    }

    type Portable = tokio::io::DuplexStream;

    fn detach(io: tokio::io::DuplexStream) -> io::Result<tokio::io::DuplexStream> {
        Ok(io)
    }

    fn attach(p: tokio::io::DuplexStream) -> io::Result<tokio::io::DuplexStream> {
        Ok(p)
    }
}

/// Accepts connections until `cancel`, then drains them for up to `l.drain`.
pub(crate) async fn serve<A, F, S>(
    mut listener: A,
    l: Listener,
    cancel: CancellationToken,
    tasks: TaskTracker,
    make: F,
) where
    A: Accept,
    F: Fn() -> S,
    S: tower::Service<Request<Incoming>, Response = Response<RespBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let builder = Arc::new(conn_builder(&l.cfg));
    let permits = Arc::new(Semaphore::new(l.cfg.max_connections));
    let graceful = GracefulShutdown::new();
    // This listener's own cut: a metrics or debug listener whose (shorter) drain runs out
    // closes only its connections; the inference listeners' cut is `l.cut` itself, which
    // marks unfinished responses as the router's (`drain_timeout`) and closes every
    // listener's connections.
    let cut = l.cut.child_token();
    loop {
        let Some(permit) = connection_slot(&permits, &l, &cancel).await else {
            break;
        };
        let Some(shared_slot) = budget_slot(&l, &cancel).await else {
            break;
        };
        let accepted = tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(err) => {
                tracing::warn!(%err, "Accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let conn = Conn {
            builder: Arc::clone(&builder),
            watcher: graceful.watcher(),
            l: l.clone(),
            cut: cut.clone(),
            permit: (permit, shared_slot),
        };
        let svc = make();
        match &l.serving {
            None => {
                tasks.spawn(conn.run::<A, S>(stream, svc));
            }
            Some(threads) => match A::detach(stream) {
                Ok(portable) => {
                    let token = tasks.token();
                    threads.spawn(move || async move {
                        let _token = token;
                        match A::attach(portable) {
                            Ok(stream) => conn.run::<A, S>(stream, svc).await,
                            Err(err) => tracing::warn!(%err, "Cannot serve an accepted connection"),
                        }
                    });
                }
                Err(err) => tracing::warn!(%err, "Cannot hand an accepted connection over"),
            },
        }
    }
    drop(listener);
    if tokio::time::timeout(l.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(drain = ?l.drain, "Connections still open after the drain timeout; closing them");
        if l.cuts_all {
            l.cut.cancel();
        } else {
            cut.cancel();
        }
    }
}

/// Runs the requests (streams) of an HTTP/2 connection on the runtime that accepted it
/// (HTTP/1 spawns nothing): a connection served on a serving thread multiplexes many
/// requests, as one from Envoy or an ingress does, and they then spread over all worker
/// threads instead of staying on the connection's own.
#[derive(Debug, Clone)]
struct StreamExecutor(tokio::runtime::Handle);

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        drop(self.0.spawn(fut));
    }
}

/// What a connection task needs besides its socket and service.
struct Conn {
    builder: Arc<hyper_util::server::conn::auto::Builder<StreamExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
    l: Listener,
    cut: CancellationToken,
    /// The listener's own slot and the shared budget's.
    permit: (OwnedSemaphorePermit, Vec<OwnedSemaphorePermit>),
}

impl Conn {
    /// Serves `stream` with `svc` (over TLS when the listener has it) until the client
    /// closes it, or the drain cut.
    async fn run<A, S>(self, stream: A::Io, svc: S)
    where
        A: Accept,
        S: tower::Service<Request<Incoming>, Response = Response<RespBody>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        A::prepare(&stream, self.l.cfg.tcp_keepalive);
        let Some(crate::server::tls::Https(acceptor)) = self.l.tls.clone() else {
            return self.serve(stream, svc).await;
        };
        let l = &self.l;
        match tokio::time::timeout(l.cfg.header_read_timeout, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => self.serve(tls, svc).await,
            Ok(Err(err)) => tracing::debug!(listener = l.name, %err, "TLS handshake failed"),
            Err(_) => l.metrics.timeout(l.name, "idle"),
        }
    }

    /// Serves `stream`, plain or TLS, with `svc`.
    async fn serve<I, S>(self, stream: I, svc: S)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: tower::Service<Request<Incoming>, Response = Response<RespBody>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        let Self {
            builder,
            watcher,
            l,
            cut,
            permit,
        } = self;
        let state = Arc::new(ConnState::default());
        let svc = Marked {
            inner: svc,
            state: Arc::clone(&state),
        };
        let io = TokioIo::new(Watched {
            inner: stream,
            state: Arc::clone(&state),
            hold: Hold::new(),
        });
        let conn = builder
            .serve_connection(io, TowerToHyperService::new(svc))
            .into_owned();
        let conn = watcher.watch(conn);
        let _open = OpenConnection::count(&l);
        let run = run_connection(conn, &state, &l);
        tokio::pin!(run);
        tokio::select! {
            biased;
            () = &mut run => {}
            () = cut.cancelled() => {
                // A response still streaming sees the cut when polled and ends with an
                // error event (`ProxyBody`), which gets `CUT_GRACE` to leave. Dropping the
                // connection then closes it (and settles an unfinished response).
                let _ = tokio::time::timeout(CUT_GRACE, &mut run).await;
            }
        }
        drop(permit);
    }
}

/// `kthena_router_downstream_connections` +1 while it lives (also when the task running the
/// connection is dropped).
struct OpenConnection {
    metrics: ListenerMetrics,
    listener: &'static str,
}

impl OpenConnection {
    fn count(l: &Listener) -> Self {
        l.metrics.connections(l.name, 1);
        Self {
            metrics: l.metrics.clone(),
            listener: l.name,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics.connections(self.listener, -1);
    }
}

/// The HTTP/1 and HTTP/2 connection settings of a listener: the header read timeout, and
/// HTTP/2 keepalive pings at the TCP keepalive interval (when it is set).
fn conn_builder(cfg: &ListenerConfig) -> hyper_util::server::conn::auto::Builder<StreamExecutor> {
    let mut builder = hyper_util::server::conn::auto::Builder::new(StreamExecutor(
        tokio::runtime::Handle::current(),
    ));
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout);
    if !cfg.tcp_keepalive.is_zero() {
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(cfg.tcp_keepalive);
    }
    builder
}

/// A connection slot under `maxConnections`: at once when one is free, else (counted and
/// logged) once a connection closes; `None` when `cancel` fires first.
async fn connection_slot(
    permits: &Arc<Semaphore>,
    l: &Listener,
    cancel: &CancellationToken,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(p) = Arc::clone(permits).try_acquire_owned() {
        return Some(p);
    }
    l.metrics.limit_reached(l.name);
    tracing::warn!(
        listener = l.name,
        max_connections = l.cfg.max_connections,
        "Connection limit reached; new connections wait until one closes"
    );
    tokio::select! {
        biased;
        () = cancel.cancelled() => None,
        p = Arc::clone(permits).acquire_owned() => p.ok(),
    }
}

/// A slot of the shared connection budget: at once when one is free, else (counted and
/// logged) once a connection of the budget closes; `None` when `cancel` fires first.
async fn budget_slot(
    l: &Listener,
    cancel: &CancellationToken,
) -> Option<Vec<OwnedSemaphorePermit>> {
    if let Some(p) = l.budget.try_take(l.inference) {
        return Some(p);
    }
    l.metrics.limit_reached(l.name);
    tracing::warn!(
        listener = l.name,
        budget = l.budget.size,
        "Open-files connection budget reached; new connections wait until one closes"
    );
    tokio::select! {
        biased;
        () = cancel.cancelled() => None,
        p = l.budget.take(l.inference) => p,
    }
}

/// Drives one connection; the first request must arrive within the header read timeout.
async fn run_connection<C>(conn: C, state: &ConnState, l: &Listener)
where
    C: Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>,
{
    tokio::pin!(conn);
    let first = tokio::select! {
        biased;
        r = &mut conn => Some(r),
        () = state.first_request.notified() => None,
        () = tokio::time::sleep(l.cfg.header_read_timeout) => {
            // Dropping the connection closes it.
            count_head_timeout(state, l);
            return;
        }
    };
    let res = match first {
        Some(r) => r,
        None => conn.await,
    };
    if let Err(err) = res {
        let timed_out = err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout);
        if timed_out {
            count_head_timeout(state, l);
        } else {
            tracing::debug!(%err, "Connection ended with an error");
        }
    }
}

fn count_head_timeout(state: &ConnState, l: &Listener) {
    let phase = if state.head_bytes.load(Ordering::Relaxed) {
        "headers"
    } else {
        "idle"
    };
    l.metrics.timeout(l.name, phase);
    tracing::debug!(
        listener = l.name,
        phase,
        timeout = ?l.cfg.header_read_timeout,
        "Closed a connection: no complete request head within the header read timeout"
    );
}

/// Sets `TCP_NODELAY` and TCP keepalive (idle = interval = `keepalive`, 9 probes; zero
/// leaves keepalive off). Failures are logged: the connection still works without them.
pub(crate) fn set_socket_options(stream: &TcpStream, keepalive: Duration) {
    let _ = stream.set_nodelay(true);
    if keepalive.is_zero() {
        return;
    }
    let ka = socket2::TcpKeepalive::new()
        .with_time(keepalive)
        .with_interval(keepalive)
        .with_retries(KEEPALIVE_PROBES);
    if let Err(err) = socket2::SockRef::from(stream).set_tcp_keepalive(&ka) {
        tracing::debug!(%err, "Cannot set TCP keepalive");
    }
}

/// What the connection task learns from the socket and the service.
#[derive(Debug, Default)]
struct ConnState {
    /// Bytes were read since the last write: a request head is (partly) in.
    head_bytes: AtomicBool,
    /// Woken when the first request reaches the service.
    first_request: Notify,
}

/// The service wrapper that signals the first request of a connection.
#[derive(Debug, Clone)]
struct Marked<S> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S, B> tower::Service<Request<B>> for Marked<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.state.first_request.notify_one();
        self.inner.call(req)
    }
}

/// A connection that notes whether bytes arrived since the router last wrote, and whose
/// writes are coalesced ([`Hold`]).
#[derive(Debug)]
struct Watched<T> {
    inner: T,
    state: Arc<ConnState>,
    hold: Hold,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.state.head_bytes.store(true, Ordering::Relaxed);
        }
        res
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.hold.poll(cx, buf.len()));
        self.state.head_bytes.store(false, Ordering::Relaxed);
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            self.hold.written(*n, buf.len());
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let offered = bufs.iter().map(|b| b.len()).sum();
        std::task::ready!(self.hold.poll(cx, offered));
        self.state.head_bytes.store(false, Ordering::Relaxed);
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &res {
            self.hold.written(*n, offered);
        }
        res
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
mod tests;
