//! The `kthena-router` command line: this router's flags and every flag Go Kthena's chart
//! gives Go's router (`cmd/kthena-router/main.go` at v1.0.0 and
//! `charts/kthena/charts/networking/templates/kthena-router/component/deployment.yaml`),
//! in Go's forms: a bool flag is `--x`, `--x=true` or `--x=false` (any value Go's
//! `strconv.ParseBool` takes), and klog's `--v=N` sets the log level.
//!
//! What each Go flag does here is listed in `docs/router.md` (Flags and environment); a Go
//! flag this router does not act on is accepted, and [`Flags::notices`] says so in one log
//! line at start. A flag given twice takes its last value, as Go's `pflag`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::config::duration::parse_go_duration;
use crate::config::env::Env;
use crate::config::overrides::{Overrides, load_config, load_defaults};
use crate::config::{Config, TlsFiles};
use crate::error::Result;

/// The file Go's router reads its configuration from (`routerConfigFile` in
/// `cmd/kthena-router/app/router.go`; Go's chart mounts the `kthena-router-config`
/// ConfigMap there). Read when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/config/routerConfiguration.yaml";

/// Kthena's OpenAI-compatible LLM router (standalone or cluster mode).
#[derive(Debug, Clone, Parser)]
#[command(name = "kthena-router", version, args_override_self = true)]
pub struct Flags {
    /// Router configuration file (scheduler section; a `standalone` section for standalone
    /// mode, none for cluster mode) [default: /etc/config/routerConfiguration.yaml when it
    /// exists, else cluster mode with the built-in defaults].
    #[arg(long, env = "KTHENA_ROUTER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Inference listener port [default: 8080, or `port` in the config file].
    #[arg(long)]
    pub port: Option<u16>,
    /// Prometheus /metrics port [default: 9090, or `metricsPort` in the config file].
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Also serve `/metrics` on the inference port (Go's chart:
    /// `kthenaRouter.metrics.exposeOnRouterPort`) [default: false, or
    /// `exposeMetricsOnRouterPort`].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = parse_go_bool, action = ArgAction::Set)]
    pub expose_metrics_on_router_port: Option<bool>,
    /// Debug port, bound to localhost [default: 15000, or `debugPort` in the config file].
    #[arg(long)]
    pub debug_port: Option<u16>,
    /// TLS certificate (PEM chain) of the inference port; with `--tls-key` the port serves
    /// HTTPS only (Go's chart passes both in cert-manager mode with `kthenaRouter.tls`).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Longest wait for a complete request head, and for the next request on an idle
    /// kept-alive connection (Go duration) [default: 60s, or `listener.headerReadTimeout`].
    #[arg(long, value_parser = parse_go_duration)]
    pub header_read_timeout: Option<Duration>,
    /// Longest wait between two reads of a request body; 408 after it
    /// [default: 60s, or `listener.bodyReadIdleTimeout`].
    #[arg(long, value_parser = parse_go_duration)]
    pub body_read_idle_timeout: Option<Duration>,
    /// Longest time to read a whole request body; 408 after it
    /// [default: 5m, or `listener.bodyReadTimeout`].
    #[arg(long, value_parser = parse_go_duration)]
    pub body_read_timeout: Option<Duration>,
    /// Most client connections open at once per listener; more wait to be accepted
    /// [default: 10000, or `listener.maxConnections`].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// TCP keepalive idle time and probe interval of client connections, `0s` = off
    /// [default: 15s, or `listener.tcpKeepalive`].
    #[arg(long, value_parser = parse_go_duration)]
    pub tcp_keepalive: Option<Duration>,
    /// Most inference requests in flight in the router, `0` = no cap; 503 with
    /// `Retry-After` beyond it [default: 10000, or `overload.maxInFlight`].
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// Most requests in flight to one endpoint, `0` = no cap
    /// [default: 1024, or `overload.maxInFlightPerEndpoint`].
    #[arg(long)]
    pub max_in_flight_per_endpoint: Option<u32>,
    /// Consecutive connect errors or 5xx that open an endpoint's circuit breaker, `0` = off
    /// [default: 5, or `overload.breakerFailures`].
    #[arg(long)]
    pub breaker_failures: Option<u32>,
    /// How long an open breaker keeps its endpoint out before one probe request
    /// [default: 10s, or `overload.breakerCoolDown`].
    #[arg(long, value_parser = parse_go_duration)]
    pub breaker_cool_down: Option<Duration>,
    /// Gateway API mode (cluster mode): Gateways of class `kthena-router` select the
    /// routing context by listener hostname; the `default` Gateway is created. `false`
    /// leaves `gatewayApi.enabled` of the config file in force.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          default_value = "false", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub enable_gateway_api: bool,
    /// HTTPRoute → InferencePool routing (requires `--enable-gateway-api`).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          default_value = "false", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub enable_gateway_api_inference_extension: bool,
    /// Endpoint-picker mode: serve Envoy's external processor (ext_proc, the Gateway API
    /// Inference Extension's protocol) over gRPC on this address, e.g. `0.0.0.0:9002`
    /// [default: off, or `endpointPicker.address`].
    #[arg(long, value_name = "ADDR")]
    pub epp: Option<SocketAddr>,
    /// Most endpoints the picker names per request (the pick, then fallbacks); 1 for
    /// Envoy ORIGINAL_DST clusters [default: 5, or `endpointPicker.maxEndpoints`].
    #[arg(long)]
    pub epp_max_endpoints: Option<usize>,
    /// Threads serving client connections, each with its own runtime and engine
    /// connections [default: the CPUs this process may use (the cgroup's CPU quota or the
    /// affinity mask, as `std::thread::available_parallelism` reads them)]. Discovery,
    /// scraping, HTTP/2 requests, the endpoint picker and the metrics and debug listeners
    /// run on a work-stealing runtime with as many worker threads.
    #[arg(long, env = "KTHENA_ROUTER_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// Go's router flags accepted for Go's chart.
    #[command(flatten, next_help_heading = "Go Kthena's flags")]
    pub go: GoOnly,
}

/// Go's router flags beyond the listener's: the validating webhook ([`Flags::webhook`]),
/// and those accepted without acting on them ([`Flags::notices`]; see `docs/router.md`).
#[derive(Debug, Clone, clap::Args)]
pub struct GoOnly {
    /// Serve the validating webhook of ModelRoute, ModelServer and ExternalModelProvider
    /// on `--webhook-port` (cluster mode), as Go's router does. Go's default is true and
    /// Go's chart always passes the flag; here the default is false, so that a router run
    /// by hand does not bind a port and write a Secret it was not asked to.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          default_value = "false", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub enable_webhook: bool,
    /// The webhook server's port, on all addresses (0 picks a free one).
    #[arg(long, default_value_t = 8443)]
    pub webhook_port: u16,
    /// The webhook certificate (PEM), used with its key when both files exist (Go's chart
    /// mounts the Secret `--cert-secret-name` there).
    #[arg(long, default_value = "/etc/tls/tls.crt")]
    pub webhook_tls_cert_file: PathBuf,
    /// The webhook certificate's private key (PEM).
    #[arg(long, default_value = "/etc/tls/tls.key")]
    pub webhook_tls_private_key_file: PathBuf,
    /// The Secret (in `POD_NAMESPACE`) every replica shares the webhook certificate
    /// through: read, or created with a generated certificate when missing.
    #[arg(long, default_value = "kthena-router-webhook-certs")]
    pub cert_secret_name: String,
    /// The webhook's Service, whose DNS names a generated certificate covers.
    #[arg(long, default_value = "kthena-router-webhook")]
    pub webhook_service_name: String,
    /// Go: client-side requests per second to the API server (client-go's `QPS`;
    /// accepted, unused: the router's API client has no client-side limit).
    #[arg(long, default_value_t = 0.0)]
    pub kube_api_qps: f32,
    /// Go: client-side burst to the API server (accepted, unused).
    #[arg(long, default_value_t = 0)]
    pub kube_api_burst: u32,
    /// klog's verbosity: 0-3 log at `info`, 4-5 at `debug`, 6 and above at `trace`
    /// (`RUST_LOG`, when set, wins).
    #[arg(long, value_name = "LEVEL")]
    pub v: Option<u8>,
    /// Go's other klog flags (`--vmodule`, `--logtostderr`, `--log_dir`, ...): accepted,
    /// ignored (logs go to stderr).
    #[arg(long = "klog", hide = true, num_args = 0..=1, value_name = "VALUE",
          default_missing_value = "true",
          alias = "vmodule", alias = "logtostderr", alias = "alsologtostderr",
          alias = "log_dir", alias = "log_file", alias = "log_file_max_size",
          alias = "one_output", alias = "skip_headers", alias = "skip_log_headers",
          alias = "stderrthreshold", alias = "add_dir_header",
          alias = "legacy_stderr_threshold_behavior", action = ArgAction::Append)]
    pub klog: Vec<String>,
}

/// A bool flag value as Go's `strconv.ParseBool` reads it: `1`, `t`, `T`, `TRUE`, `true`,
/// `True`, `0`, `f`, `F`, `FALSE`, `false`, `False`.
///
/// # Errors
/// Any other text, with the accepted values.
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {text:?}: expected true or false")),
    }
}

/// The tracing filter of klog's `--v=N`: `info` up to 3 (Go logs its normal operation at
/// `V(2)`), `debug` for 4 and 5, `trace` from 6.
#[must_use]
pub fn klog_level(v: u8) -> &'static str {
    match v {
        0..=3 => "info",
        4 | 5 => "debug",
        _ => "trace",
    }
}

impl Flags {
    /// The webhook to serve with `--enable-webhook`, in `pod_namespace` (`POD_NAMESPACE`);
    /// `None` without the flag.
    #[must_use]
    pub fn webhook(&self, pod_namespace: Option<String>) -> Option<crate::WebhookOptions> {
        let go = &self.go;
        go.enable_webhook.then(|| crate::WebhookOptions {
            port: go.webhook_port,
            files: (
                go.webhook_tls_cert_file.clone(),
                go.webhook_tls_private_key_file.clone(),
            ),
            secret: go.cert_secret_name.clone(),
            service: go.webhook_service_name.clone(),
            namespace: pod_namespace.filter(|ns| !ns.is_empty()),
        })
    }

    /// The config file to read: `--config` (or `KTHENA_ROUTER_CONFIG`), else
    /// [`DEFAULT_CONFIG_PATH`] when `exists` says it is there (Go's chart mounts it), else
    /// none (cluster mode with the built-in defaults).
    #[must_use]
    pub fn config_path(&self, exists: impl Fn(&Path) -> bool) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            let default = Path::new(DEFAULT_CONFIG_PATH);
            exists(default).then(|| default.to_path_buf())
        })
    }

    /// The configuration the binary runs with: the file of [`Flags::config_path`] (or the
    /// defaults), the environment, the flags, validation, then `--tls-cert`/`--tls-key`
    /// over the file's `tls:`. Returns the file read, for the standalone file watcher.
    ///
    /// # Errors
    /// As [`load_config`] and [`load_defaults`].
    pub fn load(
        &self,
        env: &dyn Env,
        exists: impl Fn(&Path) -> bool,
    ) -> Result<(Config, Option<PathBuf>)> {
        let path = self.config_path(exists);
        let mut cfg = match &path {
            Some(p) => load_config(p, env, self.overrides())?,
            None => load_defaults(env, self.overrides())?,
        };
        if let (Some(cert_file), Some(key_file)) = (&self.tls_cert, &self.tls_key) {
            cfg.tls = Some(TlsFiles {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            });
        }
        Ok((cfg, path))
    }

    /// The flags that override the config file (re-applied on every reload).
    #[must_use]
    pub fn overrides(&self) -> Overrides {
        Overrides {
            port: self.port,
            metrics_port: self.metrics_port,
            debug_port: self.debug_port,
            header_read_timeout: self.header_read_timeout,
            body_read_idle_timeout: self.body_read_idle_timeout,
            body_read_timeout: self.body_read_timeout,
            max_connections: self.max_connections,
            tcp_keepalive: self.tcp_keepalive,
            max_in_flight: self.max_in_flight,
            max_in_flight_per_endpoint: self.max_in_flight_per_endpoint,
            breaker_failures: self.breaker_failures,
            breaker_cool_down: self.breaker_cool_down,
            enable_gateway_api: self.enable_gateway_api,
            enable_gateway_api_inference_extension: self.enable_gateway_api_inference_extension,
            epp: self.epp,
            epp_max_endpoints: self.epp_max_endpoints,
            expose_metrics_on_router_port: self.expose_metrics_on_router_port,
        }
    }

    /// The log filter: `RUST_LOG` when set, else the level of `--v` (default `info`),
    /// with the file watcher's own logs at `error`.
    #[must_use]
    pub fn log_filter(&self, rust_log: Option<&str>) -> String {
        match rust_log.filter(|s| !s.is_empty()) {
            Some(filter) => filter.to_owned(),
            None => format!("{},notify=error", klog_level(self.go.v.unwrap_or(0))),
        }
    }

    /// One line for each accepted Go flag this router does not act on, to log at start: a
    /// client-side API rate limit and klog's flags.
    #[must_use]
    pub fn notices(&self) -> Vec<String> {
        let go = &self.go;
        let mut out = Vec::new();
        if go.kube_api_qps > 0.0 || go.kube_api_burst > 0 {
            out.push(format!(
                "--kube-api-qps={} --kube-api-burst={}: accepted and ignored; the router's \
                 API client (watches and status updates) has no client-side rate limit",
                go.kube_api_qps, go.kube_api_burst
            ));
        }
        if !go.klog.is_empty() {
            out.push(
                "klog flags other than --v are accepted and ignored; logs go to stderr".into(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests;
