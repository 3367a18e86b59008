//! Starting simulators in-process: [`spawn`], [`spawn_many`] and [`SimHandle`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::api::{self, Shared};
use crate::config::{Config, Faults};
use crate::engine::{self, Command, Scheduler};
use crate::hash::BlockHasher;
use crate::kv::KvEvent;
use crate::kv_events::{Publisher, ReplaySocket};
use crate::metrics::Metrics;
use crate::tokenize::Tokenizer;
use crate::{Error, Result};

/// A running simulator. Dropping the handle kills it (like [`SimHandle::kill`], without
/// waiting).
#[derive(Debug)]
pub struct SimHandle {
    addr: SocketAddr,
    kv_events_port: Option<u16>,
    kv_events_replay_port: Option<u16>,
    shared: Arc<Shared>,
    tracker: TaskTracker,
    /// Stops accepting connections.
    stop_accept: CancellationToken,
    /// Asks every open connection to finish its request in flight and close (hyper's
    /// graceful shutdown: idle kept-alive connections close at once).
    drain: CancellationToken,
    /// The connections being served (each holds a token of this tracker).
    conns: TaskTracker,
    /// Aborts every task, open connections included.
    kill: CancellationToken,
    /// TCP ports held (not served) so that in-memory addresses stay unique.
    _reserved: Vec<TcpListener>,
}

impl SimHandle {
    /// The bound HTTP address, e.g. `127.0.0.1:43117`.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>` without a trailing slash.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound ZMQ PUB port of the KV-event publisher, when enabled.
    #[must_use]
    pub fn kv_events_port(&self) -> Option<u16> {
        self.kv_events_port
    }

    /// The bound ZMQ ROUTER port of the KV-event replay socket, when enabled
    /// (`--kv-events-replay-port`).
    #[must_use]
    pub fn kv_events_replay_port(&self) -> Option<u16> {
        self.kv_events_replay_port
    }

    /// The served model name.
    #[must_use]
    pub fn model(&self) -> &str {
        &self.shared.cfg.model
    }

    /// Replaces the fault-injection settings; applies to requests that arrive afterwards.
    pub fn set_faults(&self, faults: Faults) {
        self.shared.faults.store(Arc::new(faults));
    }

    /// Kills the simulator at once: the listener closes and every open connection is reset,
    /// including responses that are streaming. Returns when all tasks have stopped.
    pub async fn kill(self) {
        self.kill_shared().await;
    }

    /// [`SimHandle::kill`] through a shared reference (the simulated node shares handles).
    pub(crate) async fn kill_shared(&self) {
        self.kill.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Whether the model has loaded (`--startup-delay-ms` has passed since start).
    #[must_use]
    pub fn is_loaded(&self) -> bool {
        self.shared.is_loaded()
    }

    /// Requests answered 503 because the model was still loading (`--startup-delay-ms`): a
    /// router that sends nothing before the engine is ready leaves this at 0.
    #[must_use]
    pub fn requests_while_loading(&self) -> u64 {
        self.shared.refused_loading.load(Ordering::SeqCst)
    }

    /// Generation requests in flight (admitted and not finished), as the engine's own
    /// `vllm:num_requests_running` plus `vllm:num_requests_waiting`.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// What vLLM does on SIGTERM with `--shutdown-timeout` `grace`: stops taking new work and
    /// finishes what it has, then stops. At once: the listener closes (new connections are
    /// refused), idle kept-alive connections close, a request that still arrives on an open
    /// connection is answered 503 `The server is shutting down` and that connection closes
    /// after its answer; requests already admitted go on to their end (streams to
    /// `[DONE]`). Returns true when every connection finished within `grace` (wall time);
    /// then, or at `grace`, the engine is killed (what is still open is reset).
    pub async fn drain(&self, grace: Duration) -> bool {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.stop_accept.cancel();
        self.drain.cancel();
        self.conns.close();
        let done = tokio::time::timeout(grace, self.conns.wait()).await.is_ok();
        self.kill_shared().await;
        done
    }

    /// [`SimHandle::drain`], consuming the handle.
    pub async fn shutdown(self, grace: Duration) {
        self.drain(grace).await;
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

/// A listening socket on `addr` with the kernel's full listen backlog
/// (`net.core.somaxconn`, as a Go or vLLM server gets), not tokio's 1,024: a router opening a
/// thousand connections at once must not find the accept queue full.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let backlog = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .map_or(4096, |n| n.clamp(1, u32::from(u16::MAX)));
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Starts one simulator on the current Tokio runtime: validates `config`, loads the
/// tokenizer, binds `config.host:config.port` (port 0 picks a free port) and, when
/// `kv_events_port` is set, the ZMQ publisher (port 0 picks a free port too).
///
/// # Errors
/// [`Error::Config`] for invalid values, [`Error::Tokenizer`] if the tokenizer file cannot be
/// loaded, [`Error::Bind`] / [`Error::KvEvents`] if a socket cannot be bound.
///
/// # Example
/// ```no_run
/// # async fn demo() -> kthena_sim::Result<()> {
/// let sim = kthena_sim::spawn(kthena_sim::Config::default().with_ephemeral_port()).await?;
/// println!("engine at {}", sim.base_url());
/// sim.kill().await;
/// # Ok(()) }
/// ```
pub async fn spawn(config: Config) -> Result<SimHandle> {
    start(config, None).await
}

/// Starts one simulator, as [`spawn`], on the in-memory network `net` instead of TCP and ZMQ:
/// it serves HTTP on `net` at the address [`SimHandle::addr`] names and publishes KV events
/// on `net`'s topic `tcp://<host>:<kv_events_port>` (the text a router's `kvEvents` holds),
/// and answers replay requests at `net`'s request/reply endpoint
/// `tcp://<host>:<kv_events_replay_port>` when one is configured.
/// The TCP ports stay bound without being served, so that the addresses stay unique in the
/// process. With a current-thread runtime on paused time, engines, router and client then
/// share one virtual clock (`kthena-bench`'s policy scenarios).
///
/// # Errors
/// As [`spawn`]; [`Error::Bind`] when `net` already has a listener at the address.
pub async fn spawn_in_memory(config: Config, net: &kthena_memnet::MemNet) -> Result<SimHandle> {
    start(config, Some(net)).await
}

async fn start(config: Config, net: Option<&kthena_memnet::MemNet>) -> Result<SimHandle> {
    let config = config.validate()?;
    let tokenizer = match &config.tokenizer {
        Some(path) => Tokenizer::from_file(path)?,
        None => Tokenizer::fallback(),
    };
    let bind_addr = SocketAddr::new(config.host, config.port);
    let bind_err = |source| Error::Bind {
        addr: bind_addr,
        source,
    };
    let listener = bind(bind_addr).map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let tracker = TaskTracker::new();
    let kill = CancellationToken::new();
    let mut reserved = Vec::new();
    let (events_tx, kv_ports) =
        start_kv_events(&config, &tracker, &kill, net, &mut reserved).await?;
    let shared = shared_state(config, addr, tokenizer, events_tx, &tracker, &kill);
    let acceptor = Acceptor {
        app: api::router(Arc::clone(&shared)),
        tracker: tracker.clone(),
        conns: TaskTracker::new(),
        stop: kill.child_token(),
        drain: kill.child_token(),
        kill: kill.clone(),
    };
    let (stop_accept, drain, conns) = (
        acceptor.stop.clone(),
        acceptor.drain.clone(),
        acceptor.conns.clone(),
    );
    match net {
        None => tracker.spawn(acceptor.tcp(listener)),
        Some(net) => {
            let mem = net.listen(addr).map_err(|e| Error::Bind {
                addr,
                source: e.into(),
            })?;
            reserved.push(listener);
            tracker.spawn(acceptor.memory(mem))
        }
    };
    Ok(SimHandle {
        addr,
        kv_events_port: kv_ports.map(|p| p.events),
        kv_events_replay_port: kv_ports.and_then(|p| p.replay),
        shared,
        tracker,
        stop_accept,
        drain,
        conns,
        kill,
        _reserved: reserved,
    })
}

/// The engine task (on `tracker` until `kill`) and the state the API handlers share.
fn shared_state(
    config: Config,
    addr: SocketAddr,
    tokenizer: Tokenizer,
    events_tx: Option<mpsc::UnboundedSender<Vec<KvEvent>>>,
    tracker: &TaskTracker,
    kill: &CancellationToken,
) -> Arc<Shared> {
    let metrics = Arc::new(Metrics::new(&config));
    let (engine_tx, engine_rx) = mpsc::unbounded_channel::<Command>();
    let sched = Scheduler::new(
        config.profile.clone(),
        config.seed,
        BlockHasher::new(config.prefix_caching_hash_algo, config.hash_seed.as_deref()),
        tokenizer.clone(),
        Arc::clone(&metrics),
    );
    let k = kill.clone();
    let time_scale = config.time_scale;
    tracker.spawn(async move {
        tokio::select! {
            biased;
            () = k.cancelled() => {}
            () = engine::run(sched, engine_rx, time_scale, events_tx) => {}
        }
    });
    let loras = config.lora_module_pairs().collect();
    let config_delay = config.startup_delay_ms;
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Arc::new(Shared {
        faults: ArcSwap::from_pointee(config.faults.clone()),
        fault_rng: Mutex::new(api::seeded_rng(config.seed)),
        cfg: config,
        addr,
        tokenizer,
        metrics,
        engine: engine_tx,
        loras: Mutex::new(loras),
        created,
        id_nonce: api::os_random_u64(),
        next_id: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
        idle: Notify::new(),
        draining: AtomicBool::new(false),
        loaded_at: tokio::time::Instant::now() + Duration::from_millis(config_delay),
        refused_loading: AtomicU64::new(0),
        rooms_done: Mutex::new(Vec::new()),
        room_notify: Notify::new(),
    })
}

/// The bound ports of a KV-event publisher.
#[derive(Debug, Clone, Copy)]
struct KvPorts {
    events: u16,
    replay: Option<u16>,
}

/// The sender of KV events and the publisher's bound ports when `config.kv_events_port` is
/// set (the publisher runs on `tracker` until `kill`); `(None, None)` otherwise.
async fn start_kv_events(
    config: &Config,
    tracker: &TaskTracker,
    kill: &CancellationToken,
    net: Option<&kthena_memnet::MemNet>,
    reserved: &mut Vec<TcpListener>,
) -> Result<(Option<mpsc::UnboundedSender<Vec<KvEvent>>>, Option<KvPorts>)> {
    let Some(port) = config.kv_events_port else {
        return Ok((None, None));
    };
    let topic = config
        .kv_events_topic
        .clone()
        .unwrap_or_else(|| format!("kv@{}@{}", config.host, config.model));
    let (format, ints) = (
        config.kv_events_format,
        config.kv_events_use_int_block_hashes,
    );
    let (mut publisher, bound) = match net {
        None => Publisher::bind(config.host, port, topic, format, ints).await?,
        Some(net) => {
            let endpoint = reserve(config.host, port, reserved)?;
            let p = Publisher::memory(net.publisher(&endpoint.0), topic, format, ints);
            (p, endpoint.1)
        }
    };
    let mut ports = KvPorts {
        events: bound,
        replay: None,
    };
    if let Some(port) = config.kv_events_replay_port {
        let (socket, bound) = match net {
            None => {
                let endpoint = crate::kv_events::endpoint(config.host, port);
                ReplaySocket::bind(&endpoint, port).await?
            }
            Some(net) => {
                let (endpoint, bound) = reserve(config.host, port, reserved)?;
                let responder = net.respond(endpoint.as_str()).map_err(|e| Error::Bind {
                    addr: SocketAddr::new(config.host, bound),
                    source: e.into(),
                })?;
                (ReplaySocket::Memory(responder), bound)
            }
        };
        publisher = publisher.with_replay(socket, config.kv_events_buffer_steps);
        ports.replay = Some(bound);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let k = kill.clone();
    tracker.spawn(async move {
        tokio::select! {
            biased;
            () = k.cancelled() => {}
            () = publisher.run(rx) => {}
        }
    });
    Ok((Some(tx), Some(ports)))
}

/// Holds the TCP port `host:port` (0 picks a free one) in `reserved`, so that an in-memory
/// endpoint stays unique in the process; returns its endpoint text `tcp://host:port` and
/// the port.
fn reserve(
    host: std::net::IpAddr,
    port: u16,
    reserved: &mut Vec<TcpListener>,
) -> Result<(String, u16)> {
    let addr = SocketAddr::new(host, port);
    let socket = bind(addr).map_err(|source| Error::Bind { addr, source })?;
    let bound = socket
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    reserved.push(socket);
    Ok((
        crate::kv_events::endpoint(bound.ip(), bound.port()),
        bound.port(),
    ))
}

/// What serves the accepted connections of one engine.
struct Acceptor {
    app: axum::Router,
    /// Every task of the engine.
    tracker: TaskTracker,
    /// The connections alone (what [`SimHandle::drain`] waits for).
    conns: TaskTracker,
    /// Stops accepting.
    stop: CancellationToken,
    /// Graceful shutdown of every open connection.
    drain: CancellationToken,
    /// Aborts every connection.
    kill: CancellationToken,
}

impl Acceptor {
    /// Accepts connections on `listener` until `stop` (each served with TCP_NODELAY), then
    /// drops the listener: new connections are refused.
    async fn tcp(self, listener: TcpListener) {
        loop {
            let (stream, _) = tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "Accept failed.");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            self.serve(stream);
        }
    }

    /// [`Acceptor::tcp`] on an in-memory listener.
    async fn memory(self, mut listener: kthena_memnet::MemListener) {
        loop {
            let stream = tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                r = listener.accept() => match r {
                    Some(s) => s,
                    None => return,
                },
            };
            self.serve(stream);
        }
    }

    /// Serves one connection (HTTP/1.1 or h2c) on the engine's tracker, counted in `conns`.
    fn serve<T>(&self, stream: T)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let token = self.conns.token();
        let (app, drain, kill) = (self.app.clone(), self.drain.clone(), self.kill.clone());
        self.tracker.spawn(async move {
            serve_connection(stream, app, drain, kill).await;
            drop(token);
        });
    }
}

/// Serves one connection with `app` until it ends or `kill`; on `drain`, hyper's graceful
/// shutdown: an idle connection closes at once, a busy one after its answer (HTTP/1.1
/// without keep-alive; HTTP/2 with GOAWAY).
async fn serve_connection<T>(
    stream: T,
    app: axum::Router,
    drain: CancellationToken,
    kill: CancellationToken,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        app.clone().oneshot(req.map(axum::body::Body::new))
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    let mut conn = std::pin::pin!(conn);
    let mut draining = false;
    loop {
        tokio::select! {
            biased;
            () = kill.cancelled() => return,
            () = drain.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "Connection ended with an error.");
                }
                return;
            }
        }
    }
}

/// Starts `n` simulators, each on a free port of `config.host` (the configured `port` is
/// ignored; a configured `kv_events_port` becomes "any free port" for each).
///
/// # Errors
/// As [`spawn`]; simulators already started are killed when one fails.
pub async fn spawn_many(n: usize, config: Config) -> Result<Vec<SimHandle>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = config.clone().with_ephemeral_port();
        if c.kv_events_port.is_some() {
            c.kv_events_port = Some(0);
        }
        out.push(spawn(c).await?);
    }
    Ok(out)
}
