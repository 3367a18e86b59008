//! Listeners (inference, metrics, debug), the scrape loop, the file watcher, and shutdown.

pub(crate) mod coalesce;
pub(crate) mod debug;
pub(crate) mod listener;
pub(crate) mod service;
pub(crate) mod serving;
pub(crate) mod tls;
pub(crate) mod webhook;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kthena_memnet::{Connector, MemNet};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::body::{RespBody, full};
use crate::config::Config;
use crate::config::overrides::Overrides;
use crate::discovery::{Loader, Snapshot};
use crate::error::{Error, Result};
use crate::scrape::{HttpClient, scrape_all};
use crate::server::listener::{Accept, Listener};
use crate::server::service::RouterService;
use crate::shared::Shared;
use crate::telemetry::accesslog::AccessLog;
use crate::telemetry::metrics::Metrics;
use crate::upstream::InFlightBoard;

/// A started router. Dropping it does not stop it; call [`Router::shutdown`].
#[derive(Debug)]
pub struct Router {
    /// Inference listener address.
    pub addr: SocketAddr,
    /// Metrics listener address.
    pub metrics_addr: SocketAddr,
    /// Debug listener address (localhost).
    pub debug_addr: SocketAddr,
    /// The endpoint picker's gRPC address (`endpointPicker.address`, `--epp`), when on.
    pub epp_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tasks: TaskTracker,
    drain_timeout: Duration,
    _reserved: Vec<TcpListener>,
}

/// Idle kept-alive upstream connections kept per endpoint: the default
/// `overload.maxInFlightPerEndpoint`, so that a burst of that many concurrent streams finds
/// its connections open the next time.
const POOL_MAX_IDLE_PER_ENDPOINT: usize = 1024;

/// The upstream client: HTTP/1.1 keep-alive, a pool per endpoint (a request takes an idle
/// connection or, when none is idle, opens one at once: requests never wait behind another
/// stream), idle connections closed after 90 s (a connection the engine closed first is
/// dropped from the pool, and a request given one that turns out closed before anything was
/// written is retried on another), `TCP_NODELAY`, a 5 s connect timeout.
pub(crate) fn http_client() -> HttpClient {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    conn.set_connect_timeout(Some(Duration::from_secs(5)));
    http_client_on(Connector::tcp(conn))
}

/// The upstream client's pool and timers (as [`http_client`]) on `connector`.
fn http_client_on(connector: Connector) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(POOL_MAX_IDLE_PER_ENDPOINT)
        .pool_timer(TokioTimer::new())
        .retry_canceled_requests(true)
        .build(connector)
}

impl Router {
    /// Builds the first snapshot, binds the three listeners and starts the scrape loop and,
    /// when `config_path` is given, the file watcher. Without a `standalone` section
    /// (cluster mode) it connects to the cluster named by kube config inference and starts
    /// the reflectors instead (see [`Router::start_in_cluster`]).
    ///
    /// # Errors
    /// Snapshot errors ([`Error::Manifest`], ...), [`Error::Bind`], [`Error::Watch`],
    /// [`Error::Kube`] when no cluster configuration is found.
    pub async fn start(
        cfg: Config,
        config_path: Option<PathBuf>,
        overrides: Overrides,
    ) -> Result<Self> {
        if cfg.is_cluster_mode() {
            let client = crate::discovery::cluster::connect().await?;
            return Self::start_in_cluster(cfg, client).await;
        }
        let metrics = Arc::new(Metrics::new());
        let mut loader = Loader::with_metrics(&metrics);
        let snapshot = loader.load(&cfg, config_path.as_deref())?;
        let router = Self::serve_snapshot(&cfg, snapshot, true, metrics, None).await?;
        if let Some(path) = config_path {
            crate::discovery::watch::spawn_watcher(
                Arc::clone(&router.shared),
                loader,
                cfg.clone(),
                path,
                overrides,
                router.cancel.clone(),
                &router.tasks,
            )?;
        }
        Ok(router)
    }

    /// Starts the router in cluster mode on `client`: ModelRoutes, ModelServers and Pods of
    /// all namespaces are watched; `standalone` (if any) is ignored. Serves an empty snapshot
    /// (and `/readyz` 503) until the first full sync. The config file is read once (as Go
    /// Kthena does).
    ///
    /// # Errors
    /// [`Error::Config`] for a scheduler section the registry rejects, [`Error::Bind`].
    pub async fn start_in_cluster(cfg: Config, client: kube::Client) -> Result<Self> {
        let metrics = Arc::new(Metrics::new());
        let mut loader = Loader::with_metrics(&metrics);
        let snapshot = loader.load_cluster(&cfg, Vec::new(), Vec::new(), Vec::new())?;
        let router = Self::serve_snapshot(&cfg, snapshot, false, metrics, None).await?;
        let cfg_gateway = cfg.gateway_api.clone();
        let serving = crate::gateway::Serving {
            port: router.addr.port(),
            bind: cfg.bind_address,
            serve: router.port_server(cfg.listener, cfg.drain_timeout),
        };
        let scrape = crate::discovery::cluster::ScrapeSettings {
            concurrency: cfg.metrics_scrape_concurrency,
            timeout: cfg.metrics_scrape_timeout,
        };
        crate::discovery::cluster::spawn(
            Arc::clone(&router.shared),
            loader,
            cfg,
            &client,
            scrape,
            &router.cancel,
            &router.tasks,
        );
        if cfg_gateway.enabled {
            crate::gateway::spawn(
                Arc::clone(&router.shared.gateway),
                &client,
                &cfg_gateway,
                serving,
                &router.cancel,
                &router.tasks,
            );
        }
        Ok(router)
    }

    /// Starts a standalone router (as [`Router::start`] without the file watcher) whose
    /// listeners, engine connections and KV-event subscriptions are on the in-memory
    /// network `net` instead of TCP and ZMQ: the inference, metrics and debug listeners
    /// listen on `net` at the addresses their TCP sockets were given (those stay bound, so
    /// the addresses stay unique in the process), engines are reached at their endpoint
    /// addresses on `net`, and KV events are read from `net`'s topic named by the
    /// endpoint's `kvEvents` address. Blocking work runs inline. On a current-thread
    /// runtime with paused time, a run then depends on its inputs (and
    /// [`Config::random_seed`]) alone; `kthena-bench` runs its policy scenarios this way.
    ///
    /// # Errors
    /// As [`Router::start`]; [`Error::Config`] without a `standalone` section, or with a
    /// setting that needs real sockets (see [`memory_unsupported`]).
    pub async fn start_in_memory(cfg: Config, net: MemNet) -> Result<Self> {
        Self::start_in_memory_with(cfg, net, None).await
    }

    /// [`Router::start_in_memory`], sharing its per-endpoint in-flight counts with every
    /// other router started with a clone of `in_flight` (`None`: only its own counts), as
    /// routers share them through Redis (`REDIS_HOST`, which the in-memory network cannot
    /// reach): several replicas in front of the same engines in one process, each seeing
    /// the others' requests at its next refresh ([`InFlightBoard::new`]).
    ///
    /// # Errors
    /// As [`Router::start_in_memory`].
    pub async fn start_in_memory_with(
        cfg: Config,
        net: MemNet,
        in_flight: Option<InFlightBoard>,
    ) -> Result<Self> {
        if let Some(what) = memory_unsupported(&cfg) {
            return Err(Error::Config {
                path: PathBuf::new(),
                reason: format!("the in-memory network cannot run {what}"),
            });
        }
        let metrics = Arc::new(Metrics::new());
        let mut loader = Loader::with_metrics(&metrics);
        let snapshot = loader.load(&cfg, None)?;
        let router = Self::serve_snapshot(&cfg, snapshot, true, metrics, Some(net)).await?;
        if let Some(board) = in_flight {
            // No request has arrived yet: the router's address is known to no one else.
            let share = crate::upstream::inflight::InFlightShare::Board(
                crate::upstream::inflight::BoardClient::new(board),
            );
            let _ = router.shared.in_flight_share.set(share);
        }
        Ok(router)
    }

    /// Serves the inference service on a Gateway listener socket (Gateway API mode), each
    /// request tagged with the socket's [`crate::gateway::ListenerPort`]; the listener has
    /// the main one's settings and stops (draining) when its token is cancelled.
    fn port_server(
        &self,
        cfg: crate::server::listener::ListenerConfig,
        drain: Duration,
    ) -> crate::gateway::ServePort {
        let shared = Arc::clone(&self.shared);
        let tasks = self.tasks.clone();
        Arc::new(move |socket, port, cancel| {
            let svc = RouterService::new(Arc::clone(&shared));
            let listener = Listener {
                name: "inference",
                cfg,
                metrics: shared.metrics.listener.clone(),
                drain,
                cut: shared.drain_cut.clone(),
                serving: shared.serving.clone(),
                cuts_all: false,
                budget: shared.conn_budget.clone(),
                inference: true,
                tls: None,
            };
            let tag = move |mut r: http::Request<hyper::body::Incoming>| {
                r.extensions_mut()
                    .insert(crate::gateway::ListenerPort(port));
                r
            };
            tasks.spawn(crate::server::listener::serve(
                socket,
                listener,
                cancel,
                tasks.clone(),
                move || tower::ServiceExt::map_request(svc.clone(), tag),
            ));
        })
    }

    /// Binds the listeners and starts serving `snapshot` with the scrape loop and the KV
    /// supervisor; `synced` is false while discovery still has to finish its first sync.
    async fn serve_snapshot(
        cfg: &Config,
        snapshot: Snapshot,
        synced: bool,
        metrics: Arc<Metrics>,
        memory: Option<MemNet>,
    ) -> Result<Self> {
        metrics.config_warnings(&snapshot.warnings);
        let shared = shared_state(cfg, snapshot, synced, metrics, memory)?;
        if let Some(auth) = &shared.auth {
            // Before serving, so that the first requests find the keys.
            auth.first_fetch().await;
        }
        if let Some(url) = &cfg.on_flight_redis
            && let Some(s) = crate::upstream::inflight::SharedInFlight::connect(url).await
        {
            let _ = shared
                .in_flight_share
                .set(crate::upstream::inflight::InFlightShare::Redis(s));
        }

        let tls = cfg
            .tls
            .as_ref()
            .map(|t| crate::server::tls::acceptor(&t.cert_file, &t.key_file))
            .transpose()?;
        let sockets = Sockets::bind(cfg)?;
        let addr = sockets.inference.local_addr()?;
        let metrics_addr = sockets.metrics.local_addr()?;
        let debug_addr = sockets.debug.local_addr()?;
        let epp_addr = sockets
            .epp
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;

        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let reserved = match shared.memory.clone() {
            None => {
                let trio = Trio {
                    inference: sockets.inference,
                    metrics: sockets.metrics,
                    debug: sockets.debug,
                };
                spawn_listeners(&shared, cfg, trio, tls.as_ref(), &cancel, &tasks);
                Vec::new()
            }
            Some(net) => {
                let listen = |addr: SocketAddr| {
                    net.listen(addr).map_err(|e| Error::Bind {
                        addr: addr.to_string(),
                        source: e.into(),
                    })
                };
                let trio = Trio {
                    inference: listen(addr)?,
                    metrics: listen(metrics_addr)?,
                    debug: listen(debug_addr)?,
                };
                spawn_listeners(&shared, cfg, trio, tls.as_ref(), &cancel, &tasks);
                // The TCP sockets stay bound: they reserve the addresses the in-memory
                // listeners use, so no other component of the process is given them.
                vec![sockets.inference, sockets.metrics, sockets.debug]
            }
        };
        spawn_background(&shared, cfg, &cancel, &tasks);
        if let Some(l) = sockets.epp {
            let shared = Arc::clone(&shared);
            crate::epp::spawn(l, shared, &cfg.endpoint_picker, &cancel, &tasks);
        }
        let https = cfg.tls.is_some();
        let metrics_on_port = cfg.expose_metrics_on_router_port;
        tracing::info!(%addr, https, metrics_on_port, %metrics_addr, %debug_addr, epp_addr = ?epp_addr, "Router listening");
        Ok(Self {
            addr,
            metrics_addr,
            debug_addr,
            epp_addr,
            shared,
            cancel,
            tasks,
            drain_timeout: cfg.drain_timeout,
            _reserved: reserved,
        })
    }

    /// The current snapshot's generation (increases with every accepted reload).
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.shared.snapshot.load().generation
    }

    /// The current snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    /// Blocks until every access-log entry of the requests settled so far is written and
    /// flushed to its output (at most 5 s; the log is written by its own thread).
    pub fn flush_access_log(&self) {
        self.shared.access_log.flush();
    }

    /// Stops accepting, lets in-flight requests finish for up to the drain timeout, waits
    /// for every task, and flushes the access log.
    pub async fn shutdown(self) {
        self.shutdown_or_cut(std::future::pending()).await;
    }

    /// [`Router::shutdown`], with the drain cut short when `cut` completes first (the
    /// binary passes a second SIGTERM or Ctrl-C): what is still in flight then ends as at
    /// the drain timeout (an SSE error event or 503, both `drain_timeout`).
    pub async fn shutdown_or_cut(self, cut: impl std::future::Future<Output = ()>) {
        self.cancel.cancel();
        // Held requests cannot be released while the router drains: answered now (503
        // with `Retry-After`), their clients retry another replica.
        self.shared.cold_start.shut();
        self.tasks.close();
        let wait = tokio::time::timeout(
            self.drain_timeout + Duration::from_secs(1),
            self.tasks.wait(),
        );
        let drained = tokio::select! {
            biased;
            waited = wait => {
                if waited.is_err() {
                    tracing::warn!("Drain timeout reached; closing remaining connections");
                }
                waited.is_ok()
            }
            () = cut => {
                tracing::warn!("Second shutdown signal; closing remaining connections");
                false
            }
        };
        if !drained {
            self.shared.drain_cut.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(1), self.tasks.wait()).await;
        }
        // Output charges of global rate limits still on their way to Redis.
        let _ = tokio::time::timeout(Duration::from_secs(3), self.shared.rate_limits.drain()).await;
        if let Some(serving) = self.shared.serving.clone() {
            let _ = tokio::task::spawn_blocking(move || serving.stop()).await;
        }
        let log = Arc::clone(&self.shared.access_log);
        let _ = tokio::task::spawn_blocking(move || log.flush()).await;
    }
}

/// The state every request shares, around the first snapshot.
fn shared_state(
    cfg: &Config,
    snapshot: Snapshot,
    synced: bool,
    metrics: Arc<Metrics>,
    memory: Option<MemNet>,
) -> Result<Arc<Shared>> {
    let access_log = Arc::new(AccessLog::open(
        &cfg.access_log,
        metrics.access_log_dropped.clone(),
    )?);
    let client = match &memory {
        Some(net) => http_client_on(Connector::memory(net.clone())),
        None => http_client(),
    };
    let mut shared = Shared::new(snapshot, client, metrics, access_log, cfg.max_body_bytes)
        .with_listener(cfg.listener)
        .with_overload(cfg.overload)
        .with_cold_start(cfg.cold_start)
        .with_upstream_idle_timeout(cfg.upstream_idle_timeout)
        .with_auth(&cfg.auth);
    if let Some(seed) = cfg.random_seed {
        shared = shared.with_seed(seed);
    }
    if memory.is_none() && cfg.serving_threads > 0 {
        let threads =
            crate::server::serving::ServingThreads::start(cfg.serving_threads, http_client)
                .map_err(Error::ServingThreads)?;
        shared.serving = Some(Arc::new(threads));
    }
    shared.memory = memory;
    shared.synced.store(synced, Ordering::Release);
    let shared = Arc::new(shared);
    crate::pipeline::install_queues(&shared, &cfg.queue);
    Ok(shared)
}

/// Runs the router until Ctrl-C or SIGTERM, then drains.
///
/// # Errors
/// As [`Router::start`].
pub async fn run(cfg: Config, config_path: Option<PathBuf>, overrides: Overrides) -> Result<()> {
    let router = Router::start(cfg, config_path, overrides).await?;
    shutdown_signal().await;
    tracing::info!("Shutting down (a second SIGTERM or Ctrl-C cuts the drain short)");
    router
        .shutdown_or_cut(second_signal(tokio::time::Instant::now()))
        .await;
    Ok(())
}

/// A signal that comes this soon after the first is the same stop delivered twice (Ctrl-C
/// in a terminal reaches the router and the script that started it, which passes it on).
const SIGNAL_ECHO: Duration = Duration::from_secs(1);

/// Completes at the first SIGTERM or Ctrl-C at least [`SIGNAL_ECHO`] after `first`.
async fn second_signal(first: tokio::time::Instant) {
    loop {
        shutdown_signal().await;
        if first.elapsed() >= SIGNAL_ECHO {
            return;
        }
        tracing::debug!("A second signal right after the first; taken as the same stop");
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    biased;
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn scrape_loop(
    shared: Arc<Shared>,
    cancel: CancellationToken,
    every: Duration,
    timeout: Duration,
    concurrency: usize,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let targets = shared.snapshot.load().scrape_targets();
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            () = scrape_all(&shared.client, targets, concurrency, timeout) => {}
        }
        shared.ready.store(true, Ordering::Release);
    }
}

#[derive(Debug, Clone, Copy)]
enum Mini {
    Metrics,
    Debug,
}

/// The metrics and debug listeners' service.
#[derive(Debug, Clone)]
struct MiniService {
    shared: Arc<Shared>,
    kind: Mini,
}

impl tower::Service<Request<Incoming>> for MiniService {
    type Response = Response<RespBody>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = std::result::Result<Response<RespBody>, Infallible>>
                + Send,
        >,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let resp = match (self.kind, req.method(), req.uri().path()) {
            (Mini::Metrics, &Method::GET, "/metrics") => metrics_response(&self.shared),
            (Mini::Debug, &Method::GET, _) => {
                let answer = debug::answer_get(Arc::clone(&self.shared), req.uri().clone());
                return Box::pin(async move { Ok(answer.await) });
            }
            _ => {
                let mut r = Response::new(full(r#"{"error":"not found"}"#));
                *r.status_mut() = StatusCode::NOT_FOUND;
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                r
            }
        };
        Box::pin(std::future::ready(Ok(resp)))
    }
}

/// `GET /metrics`: the router's families in OpenMetrics text (the metrics listener, and
/// the inference listener with `exposeMetricsOnRouterPort`).
pub(crate) fn metrics_response(shared: &Shared) -> Response<RespBody> {
    let snap = shared.snapshot.load_full();
    shared.metrics.plugins.sync(&snap.scheduler);
    shared
        .metrics
        .cold_start
        .refresh_idle(snap.servers.keys().map(String::as_str));
    let mut r = Response::new(full(Bytes::from(shared.metrics.encode())));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        // The encoder writes OpenMetrics (`# TYPE x counter` over `x_total`, `# EOF`);
        // announced as text 0.0.4, parsers lost the counter types.
        http::HeaderValue::from_static(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    );
    r
}

/// The first setting of `cfg` that [`Router::start_in_memory`] cannot run, because it
/// needs the cluster or real sockets: cluster mode, a Redis KV index or shared in-flight
/// counts, JWT authentication (its key set is fetched over HTTPS), the endpoint picker.
fn memory_unsupported(cfg: &Config) -> Option<&'static str> {
    if cfg.is_cluster_mode() {
        Some("cluster mode (it needs a `standalone` section)")
    } else if cfg.kv_cache.index == crate::kv::config::IndexBackend::Redis {
        Some("`kvCache.index: redis`")
    } else if cfg.on_flight_redis.is_some() {
        Some("shared in-flight counts in Redis (`REDIS_HOST`)")
    } else if !cfg.auth.jwks_uri.is_empty() {
        Some("JWT authentication (`auth.jwksUri`)")
    } else if cfg.endpoint_picker.address.is_some() {
        Some("the endpoint picker (`endpointPicker.address`)")
    } else {
        None
    }
}

/// The inference, metrics and debug listeners' sockets.
struct Trio<A> {
    inference: A,
    metrics: A,
    debug: A,
}

/// Serves the inference service and the metrics and debug endpoints on `trio` until
/// `cancel` (then draining: `drainTimeout` for inference, 15 s for the others).
fn spawn_listeners<A: Accept>(
    shared: &Arc<Shared>,
    cfg: &Config,
    trio: Trio<A>,
    tls: Option<&crate::server::tls::Https>,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let listener = |name: &'static str, drain: Duration| Listener {
        name,
        cfg: cfg.listener,
        metrics: shared.metrics.listener.clone(),
        drain,
        cut: shared.drain_cut.clone(),
        // Only the inference listener's connections are worth a thread of their own.
        serving: (name == "inference")
            .then(|| shared.serving.clone())
            .flatten(),
        cuts_all: name == "inference",
        budget: shared.conn_budget.clone(),
        inference: name == "inference",
        tls: tls.filter(|_| name == "inference").cloned(),
    };
    let svc =
        RouterService::new(Arc::clone(shared)).with_metrics(cfg.expose_metrics_on_router_port);
    tasks.spawn(crate::server::listener::serve(
        trio.inference,
        listener("inference", cfg.drain_timeout),
        cancel.clone(),
        tasks.clone(),
        move || svc.clone(),
    ));
    for (socket, name, kind) in [
        (trio.metrics, "metrics", Mini::Metrics),
        (trio.debug, "debug", Mini::Debug),
    ] {
        let shared = Arc::clone(shared);
        tasks.spawn(crate::server::listener::serve(
            socket,
            listener(name, Duration::from_secs(15)),
            cancel.clone(),
            tasks.clone(),
            move || MiniService {
                shared: Arc::clone(&shared),
                kind,
            },
        ));
    }
}

/// The router's listening sockets: inference (`bindAddress:port`), metrics
/// (`bindAddress:metricsPort`), debug (127.0.0.1:`debugPort`) and, when configured, the
/// endpoint picker's.
struct Sockets {
    inference: TcpListener,
    metrics: TcpListener,
    debug: TcpListener,
    epp: Option<TcpListener>,
}

impl Sockets {
    /// Binds all of them; [`Error::Bind`] names the address that failed.
    fn bind(cfg: &Config) -> Result<Self> {
        let bind = |addr: SocketAddr| {
            crate::server::listener::bind(addr).map_err(|source| Error::Bind {
                addr: addr.to_string(),
                source,
            })
        };
        Ok(Self {
            inference: bind(SocketAddr::new(cfg.bind_address, cfg.port))?,
            metrics: bind(SocketAddr::new(cfg.bind_address, cfg.metrics_port))?,
            debug: bind(SocketAddr::from(([127, 0, 0, 1], cfg.debug_port)))?,
            epp: cfg.endpoint_picker.address.map(bind).transpose()?,
        })
    }
}

/// The loops that run beside the listeners until `cancel`: the engine-metrics scrape, the
/// JWKS refresh (with `auth`) and the KV-event supervisor.
fn spawn_background(
    shared: &Arc<Shared>,
    cfg: &Config,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    tasks.spawn(scrape_loop(
        Arc::clone(shared),
        cancel.clone(),
        cfg.metrics_scrape_interval,
        cfg.metrics_scrape_timeout,
        cfg.metrics_scrape_concurrency,
    ));
    if let Some(auth) = &shared.auth {
        tasks.spawn(Arc::clone(auth).run(cancel.clone()));
    }
    tasks.spawn(crate::kv::supervise::supervise(
        Arc::clone(shared),
        cancel.clone(),
        tasks.clone(),
    ));
    crate::kv::redis_gc::spawn(shared, cfg, cancel, tasks);
}
