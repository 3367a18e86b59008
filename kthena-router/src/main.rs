//! The `kthena-router` binary: parse flags, install tracing, load and validate the config,
//! run the router. Exit code 64 for a bad configuration, 1 for other failures.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kthena_router::{Error, Overrides, ProcessEnv};

/// Kthena's OpenAI-compatible LLM router (standalone or cluster mode).
#[derive(Debug, Parser)]
#[command(name = "kthena-router", version)]
struct Args {
    /// Router configuration file (scheduler section; a `standalone` section for standalone mode, none for cluster mode).
    #[arg(long, env = "KTHENA_ROUTER_CONFIG")]
    config: PathBuf,
    /// Inference listener port [default: 8080, or `port` in the config file].
    #[arg(long)]
    port: Option<u16>,
    /// Prometheus /metrics port [default: 9090, or `metricsPort` in the config file].
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Debug port, bound to localhost [default: 15000, or `debugPort` in the config file].
    #[arg(long)]
    debug_port: Option<u16>,
    /// Longest wait for a complete request head, and for the next request on an idle
    /// kept-alive connection (Go duration) [default: 60s, or `listener.headerReadTimeout`].
    #[arg(long, value_parser = kthena_router::parse_go_duration)]
    header_read_timeout: Option<Duration>,
    /// Longest wait between two reads of a request body; 408 after it
    /// [default: 60s, or `listener.bodyReadIdleTimeout`].
    #[arg(long, value_parser = kthena_router::parse_go_duration)]
    body_read_idle_timeout: Option<Duration>,
    /// Longest time to read a whole request body; 408 after it
    /// [default: 5m, or `listener.bodyReadTimeout`].
    #[arg(long, value_parser = kthena_router::parse_go_duration)]
    body_read_timeout: Option<Duration>,
    /// Most client connections open at once per listener; more wait to be accepted
    /// [default: 10000, or `listener.maxConnections`].
    #[arg(long)]
    max_connections: Option<usize>,
    /// TCP keepalive idle time and probe interval of client connections, `0s` = off
    /// [default: 15s, or `listener.tcpKeepalive`].
    #[arg(long, value_parser = kthena_router::parse_go_duration)]
    tcp_keepalive: Option<Duration>,
    /// Most inference requests in flight in the router, `0` = no cap; 503 with
    /// `Retry-After` beyond it [default: 10000, or `overload.maxInFlight`].
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Most requests in flight to one endpoint, `0` = no cap
    /// [default: 1024, or `overload.maxInFlightPerEndpoint`].
    #[arg(long)]
    max_in_flight_per_endpoint: Option<u32>,
    /// Consecutive connect errors or 5xx that open an endpoint's circuit breaker, `0` = off
    /// [default: 5, or `overload.breakerFailures`].
    #[arg(long)]
    breaker_failures: Option<u32>,
    /// How long an open breaker keeps its endpoint out before one probe request
    /// [default: 10s, or `overload.breakerCoolDown`].
    #[arg(long, value_parser = kthena_router::parse_go_duration)]
    breaker_cool_down: Option<Duration>,
    /// Gateway API mode (cluster mode): Gateways of class `kthena-router` select the
    /// routing context by listener hostname; the `default` Gateway is created.
    #[arg(long)]
    enable_gateway_api: bool,
    /// HTTPRoute → InferencePool routing (requires `--enable-gateway-api`).
    #[arg(long)]
    enable_gateway_api_inference_extension: bool,
    /// Endpoint-picker mode: serve Envoy's external processor (ext_proc, the Gateway API
    /// Inference Extension's protocol) over gRPC on this address, e.g. `0.0.0.0:9002`
    /// [default: off, or `endpointPicker.address`].
    #[arg(long, value_name = "ADDR")]
    epp: Option<std::net::SocketAddr>,
    /// Most endpoints the picker names per request (the pick, then fallbacks); 1 for
    /// Envoy ORIGINAL_DST clusters [default: 5, or `endpointPicker.maxEndpoints`].
    #[arg(long)]
    epp_max_endpoints: Option<usize>,
    /// Threads serving client connections, each with its own runtime and engine
    /// connections [default: the CPUs this process may use (the cgroup's CPU quota or the
    /// affinity mask, as `std::thread::available_parallelism` reads them)]. Discovery,
    /// scraping, HTTP/2 requests, the endpoint picker and the metrics and debug listeners
    /// run on a work-stealing runtime with as many worker threads.
    #[arg(long, env = "KTHENA_ROUTER_WORKER_THREADS")]
    worker_threads: Option<usize>,
}

/// mimalloc instead of glibc's allocator: a request allocates and frees many small buffers
/// (headers, labels, JSON), on several threads; mimalloc's thread-local free lists make each
/// of them a few instructions (see `docs/router.md`, Connections and threads).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serving threads: `flag`, else the CPUs the process may use (at least 1).
fn worker_threads(flag: Option<usize>) -> usize {
    flag.filter(|n| *n > 0).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,notify=error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    raise_open_files_limit();
    let overrides = Overrides {
        port: args.port,
        metrics_port: args.metrics_port,
        debug_port: args.debug_port,
        header_read_timeout: args.header_read_timeout,
        body_read_idle_timeout: args.body_read_idle_timeout,
        body_read_timeout: args.body_read_timeout,
        max_connections: args.max_connections,
        tcp_keepalive: args.tcp_keepalive,
        max_in_flight: args.max_in_flight,
        max_in_flight_per_endpoint: args.max_in_flight_per_endpoint,
        breaker_failures: args.breaker_failures,
        breaker_cool_down: args.breaker_cool_down,
        enable_gateway_api: args.enable_gateway_api,
        enable_gateway_api_inference_extension: args.enable_gateway_api_inference_extension,
        epp: args.epp,
        epp_max_endpoints: args.epp_max_endpoints,
    };
    let cfg = match kthena_router::load_config(&args.config, &ProcessEnv, overrides) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "Invalid configuration");
            return ExitCode::from(64);
        }
    };
    let mut cfg = cfg;
    cfg.serving_threads = worker_threads(args.worker_threads);
    tracing::debug!(threads = cfg.serving_threads, "Starting the runtime");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.serving_threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "Cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(kthena_router::run(cfg, Some(args.config), overrides)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(
            e @ (Error::Config { .. }
            | Error::Manifest { .. }
            | Error::Env { .. }
            | Error::ReadFile { .. }
            | Error::AccessLogOpen { .. }),
        ) => {
            tracing::error!(error = %e, "Invalid configuration");
            ExitCode::from(64)
        }
        Err(e) => {
            tracing::error!(error = %e, "Router failed");
            ExitCode::from(1)
        }
    }
}

/// Raises the soft limit on open files to the hard limit, as the Go runtime does for Go
/// Kthena's router: every proxied request holds two sockets, and the usual soft limit of
/// 1,024 would refuse connections at about 500 concurrent requests.
fn raise_open_files_limit() {
    let before = rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(soft, _)| soft);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(now) => {
            if before.as_ref().is_ok_and(|b| *b < now) {
                tracing::debug!(before = ?before.ok(), now, "Raised the open-files limit");
            }
        }
        Err(e) => tracing::warn!(error = %e, "Cannot raise the open-files limit"),
    }
}
