//! The router configuration file, environment variables and their precedence.
//!
//! Precedence, lowest first: built-in defaults, Go Kthena's environment variables
//! (`METRICS_SCRAPE_INTERVAL`, `ACCESS_LOG_ENABLED`, `ACCESS_LOG_FORMAT`,
//! `ACCESS_LOG_OUTPUT`, `DRAIN_TIMEOUT`, `POD_NAMESPACE`), the keys the config file sets,
//! then command-line flags (`--port`, `--metrics-port`, `--debug-port`, ...). Go's chart
//! sets those variables from its values on every install, so a key written in the file
//! wins over them; a key the file leaves out takes the variable.

pub(crate) mod duration;
pub(crate) mod env;
pub mod flags;
pub(crate) mod overrides;

pub use crate::auth::AuthConfig;
pub use crate::coldstart::config::ColdStartConfig;
pub use crate::gateway::GatewayApiConfig;
pub use crate::kv::config::{IndexBackend, KvCacheConfig, RedisConfig, TokenizerConfig};
pub use crate::provider::SecretSource;
pub use crate::queue::{
    FairnessConfig, QueueConfig, QueueMode, SessionBoostConfig, UserLabelConfig,
};
pub use crate::server::listener::ListenerConfig;
pub use crate::upstream::overload::OverloadConfig;
pub use duration::parse_go_duration;
pub use env::{Env, ProcessEnv};
pub use flags::{DEFAULT_CONFIG_PATH, Flags};
pub use overrides::{Overrides, load_config, load_defaults};

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};

use crate::config::duration::go_duration;

/// The `scheduler:` section in Kthena's format (`plugins.Filter/Score`, `pluginConfig`),
/// owned by `kthena-sched`.
pub type SchedulerConfig = kthena_sched::Config;

/// Default number of ranked endpoints tried when the ModelServer sets no retry policy
/// (Go Kthena tries its top 5).
pub const DEFAULT_ATTEMPTS: usize = 5;

/// The router's configuration: one struct, defaults documented on [`Config::default`].
///
/// Every key at every level is checked: an unknown key is an error naming its path and the
/// closest known key; a section of a Go Kthena feature this router does not have yet (see
/// [`UNSUPPORTED_SECTIONS`]) is an error saying so.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Config {
    /// Kthena's scheduler section, unchanged from Go Kthena's `routerConfiguration.yaml`.
    pub scheduler: SchedulerConfig,
    /// Inference listener port (default 8080, flag `--port`).
    pub port: u16,
    /// Prometheus `/metrics` listener port (default 9090, flag `--metrics-port`).
    pub metrics_port: u16,
    /// Debug listener port, bound to localhost only (default 15000, flag `--debug-port`).
    pub debug_port: u16,
    /// Also serve `/metrics` on the inference listener (default false, as Go's chart
    /// `kthenaRouter.metrics.exposeOnRouterPort`; flag `--expose-metrics-on-router-port`).
    pub expose_metrics_on_router_port: bool,
    /// HTTPS on the inference listener (default off; flags `--tls-cert`, `--tls-key`, which
    /// win over the file). Read at start only.
    pub tls: Option<TlsFiles>,
    /// Address the inference and metrics listeners bind (default `0.0.0.0`).
    pub bind_address: std::net::IpAddr,
    /// Largest accepted request body in bytes (default 10 MiB); larger bodies get 413.
    pub max_body_bytes: usize,
    /// Engine metrics scrape interval (default `1s`; env `METRICS_SCRAPE_INTERVAL`).
    #[serde(with = "go_duration")]
    pub metrics_scrape_interval: Duration,
    /// Timeout of one scrape (`/metrics` or `/v1/models`) (default `5s`).
    #[serde(with = "go_duration")]
    pub metrics_scrape_timeout: Duration,
    /// Most endpoints scraped at the same time (default 100, as Go Kthena).
    pub metrics_scrape_concurrency: usize,
    /// Graceful shutdown bound for in-flight requests (default `5m`; env `DRAIN_TIMEOUT`).
    #[serde(with = "go_duration")]
    pub drain_timeout: Duration,
    /// Longest gap between two body chunks of an engine's answer after its headers (default
    /// `5m`, as Envoy's `stream_idle_timeout`; `0s` = none). When it passes, the client stream
    /// ends with an error (an SSE error event first for streams) and the engine connection is
    /// closed.
    #[serde(with = "go_duration")]
    pub upstream_idle_timeout: Duration,
    /// Access log settings.
    pub access_log: AccessLogConfig,
    /// Slow-client protection of the listeners: read timeouts, connection cap, TCP keepalive.
    pub listener: crate::server::listener::ListenerConfig,
    /// Overload protection: in-flight caps and per-endpoint circuit breakers.
    pub overload: crate::upstream::overload::OverloadConfig,
    /// Holding requests while their ModelServer has no ready endpoint (hot reloaded).
    pub cold_start: crate::coldstart::config::ColdStartConfig,
    /// Standalone discovery: manifests and endpoints. Absent (the default): cluster mode,
    /// where ModelRoutes, ModelServers and Pods come from the Kubernetes API server named
    /// by the usual kube config inference (`KUBECONFIG`, `~/.kube/config`, in-cluster
    /// service account).
    #[serde(default)]
    pub standalone: Option<Standalone>,
    /// KV-cache-aware routing: index backend, tokenizers (see `docs/kv-cache-routing.md`).
    pub kv_cache: crate::kv::config::KvCacheConfig,
    /// JWT authentication of `/v1/*` (Go's `auth:` section; off without `jwksUri`).
    pub auth: crate::auth::AuthConfig,
    /// Gateway API mode and the Inference Extension (cluster mode only, see
    /// `docs/gateway-api.md`; flags `--enable-gateway-api`,
    /// `--enable-gateway-api-inference-extension`).
    pub gateway_api: crate::gateway::GatewayApiConfig,
    /// Endpoint-picker mode: Envoy's external processor (ext_proc) over gRPC, the Gateway
    /// API Inference Extension's protocol (off by default; flags `--epp`,
    /// `--epp-max-endpoints`; see `docs/embedding.md`).
    pub endpoint_picker: EndpointPickerConfig,
    /// The fairness or session-boost queue, from Go Kthena's environment variables only
    /// (`ENABLE_FAIRNESS_SCHEDULING`, `ENABLE_SESSION_BOOST`, ...; see `docs/router.md`).
    #[serde(skip)]
    pub queue: crate::queue::QueueConfig,
    /// Redis for per-endpoint in-flight counts shared by routers (`redis://host:port/0`),
    /// from Go Kthena's `REDIS_HOST`, `REDIS_PORT`, `REDIS_PASSWORD` only.
    #[serde(skip)]
    pub on_flight_redis: Option<String>,
    /// Seed of the router's random draws (the `random` score plugin, weighted ModelRoute
    /// targets); `None` (the default) seeds from the clock. Not a config key: set by programs
    /// that embed the router and need runs that repeat, such as `kthena-bench`.
    #[serde(skip)]
    pub random_seed: Option<u64>,
    /// Threads that serve the inference listeners' connections over TCP, each with its own
    /// current-thread runtime and engine connection pool (thread-per-core, see
    /// `docs/router.md`); default: the CPUs the process may use
    /// (`std::thread::available_parallelism`); `0` serves them on the runtime that started
    /// the router. Not a config key: the `kthena-router` binary sets it from
    /// `--worker-threads`. Ignored on the in-memory network.
    #[serde(skip)]
    pub serving_threads: usize,
    /// The directory relative paths are resolved against (the config file's directory);
    /// not read from the file.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The keys of [`ENV_KEYS`] the config file sets: their environment variables are
    /// then not applied. Not read from the file.
    #[serde(skip)]
    pub file_keys: Vec<&'static str>,
}

/// The config keys that a Go Kthena environment variable also sets, as `(key path,
/// variable)`: the file's key wins when present.
pub const ENV_KEYS: &[(&str, &str)] = &[
    ("metricsScrapeInterval", "METRICS_SCRAPE_INTERVAL"),
    ("drainTimeout", "DRAIN_TIMEOUT"),
    ("accessLog.enabled", "ACCESS_LOG_ENABLED"),
    ("accessLog.format", "ACCESS_LOG_FORMAT"),
    ("accessLog.output", "ACCESS_LOG_OUTPUT"),
];

/// The keys of [`ENV_KEYS`] present in a parsed file.
fn file_keys(value: &serde_json::Value) -> Vec<&'static str> {
    ENV_KEYS
        .iter()
        .map(|(key, _)| *key)
        .filter(|key| {
            key.split('.')
                .try_fold(value, |v, part| v.get(part))
                .is_some()
        })
        .collect()
}

/// The `tls:` section: the inference listener's certificate and key, PEM files (Go's
/// `--tls-cert`, `--tls-key`, `cmd/kthena-router/main.go`). Relative paths are resolved
/// against the config file's directory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (`tls.crt`).
    pub cert_file: PathBuf,
    /// Its private key (`tls.key`; PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// The `endpointPicker:` section (flags `--epp`, `--epp-max-endpoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct EndpointPickerConfig {
    /// gRPC address of the external processor (`None`, the default: mode off). GIE's
    /// endpoint pickers listen on port 9002.
    pub address: Option<SocketAddr>,
    /// Most endpoints named in `x-gateway-destination-endpoint`: the pick, then fallbacks
    /// in rank order (default 5, the router's attempts; a ModelServer's `retryPolicy`
    /// lowers it). `1` for Envoy `ORIGINAL_DST` clusters, which read a single address.
    pub max_endpoints: usize,
}

impl Default for EndpointPickerConfig {
    fn default() -> Self {
        Self {
            address: None,
            max_endpoints: DEFAULT_ATTEMPTS,
        }
    }
}

/// Access log settings (Go Kthena's `ACCESS_LOG_*` variables,
/// `pkg/kthena-router/router/router.go`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct AccessLogConfig {
    /// Emit one line per `/v1/*` request (default true; env `ACCESS_LOG_ENABLED`).
    pub enabled: bool,
    /// `text` (default) or `json` (env `ACCESS_LOG_FORMAT`).
    pub format: AccessLogFormat,
    /// `stdout` (default), `stderr`, or a file path opened for append (env `ACCESS_LOG_OUTPUT`).
    pub output: String,
}

/// Access log line format.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    /// Go Kthena's text line.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `standalone:` section: what stands in for the Kubernetes API.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Standalone {
    /// Files or folders (non-recursive, `*.yaml`, `*.yml`, `*.json`) of ModelRoute and
    /// ModelServer manifests, as a user would `kubectl apply` them. Other kinds are ignored.
    pub manifests: Vec<PathBuf>,
    /// The engine instances that stand in for Pods.
    pub endpoints: Vec<EndpointConfig>,
    /// Files or environment variables standing in for the Secret keys that
    /// ExternalModelProviders name.
    #[serde(default)]
    pub secrets: Vec<crate::provider::SecretSource>,
}

/// One engine instance.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointConfig {
    /// Unique name (the "pod name" in logs, metrics and the scheduler).
    pub name: String,
    /// `host:port`; IPv6 literals in brackets (`[::1]:8000`).
    pub address: String,
    /// Namespace of the stand-in Pod; only ModelServers of that namespace select it
    /// (default `default`).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Labels matched by `ModelServer.spec.workloadSelector.matchLabels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Optional KV-events address (`tcp://host:port`), kept for the kvcache-aware plugin.
    #[serde(default)]
    pub kv_events: Option<String>,
    /// Optional KV-events replay address (`tcp://host:port`, vLLM's `replay_endpoint`),
    /// asked for missed batches after a sequence gap.
    #[serde(default)]
    pub kv_events_replay: Option<String>,
    /// Cluster mode: the pod's incarnation, `{uid}/{restarts}` (the restart count summed over
    /// its containers). A change means the engine restarted: the endpoint is rebuilt and its
    /// KV-index entries are dropped. Never read from a file.
    #[serde(skip)]
    pub incarnation: Option<String>,
    /// Cluster mode: Unix seconds of the newest `startedAt` among the pod's running
    /// containers; Redis KV-index owners written at or before it are stale (Go Kthena
    /// `pkg/kthena-router/scheduler/plugins/kvcache_aware.go`). Never read from a file.
    #[serde(skip)]
    pub container_started: Option<i64>,
}

fn default_namespace() -> String {
    "default".into()
}

// === impl Config ===

impl Default for Config {
    /// Defaults: ports 8080/9090/15000 on `0.0.0.0`, 10 MiB bodies, scrape every 1 s with a
    /// 5 s timeout and at most 100 concurrent scrapes, 5 min drain, 5 min upstream idle timeout, text access log on stdout,
    /// the listener defaults of [`ListenerConfig`](crate::server::listener::ListenerConfig), those of
    /// [`OverloadConfig`](crate::upstream::overload::OverloadConfig), the
    /// scheduler's own defaults, no `standalone` section (cluster mode).
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            port: 8080,
            metrics_port: 9090,
            debug_port: 15000,
            expose_metrics_on_router_port: false,
            tls: None,
            bind_address: std::net::IpAddr::from([0, 0, 0, 0]),
            max_body_bytes: 10 * 1024 * 1024,
            metrics_scrape_interval: Duration::from_secs(1),
            metrics_scrape_timeout: Duration::from_secs(5),
            metrics_scrape_concurrency: 100,
            drain_timeout: Duration::from_secs(300),
            upstream_idle_timeout: Duration::from_secs(300),
            access_log: AccessLogConfig::default(),
            listener: crate::server::listener::ListenerConfig::default(),
            overload: crate::upstream::overload::OverloadConfig::default(),
            cold_start: crate::coldstart::config::ColdStartConfig::default(),
            standalone: None,
            kv_cache: crate::kv::config::KvCacheConfig::default(),
            auth: crate::auth::AuthConfig::default(),
            gateway_api: crate::gateway::GatewayApiConfig::default(),
            endpoint_picker: EndpointPickerConfig::default(),
            queue: crate::queue::QueueConfig::default(),
            on_flight_redis: None,
            random_seed: None,
            serving_threads: std::thread::available_parallelism()
                .map_or(1, std::num::NonZeroUsize::get),
            base_dir: PathBuf::from("."),
            file_keys: Vec::new(),
        }
    }
}

impl Default for AccessLogConfig {
    /// Enabled, text, stdout.
    fn default() -> Self {
        Self {
            enabled: true,
            format: AccessLogFormat::Text,
            output: "stdout".into(),
        }
    }
}

impl Config {
    /// Parses a config from YAML text; `path` names it in errors and sets
    /// [`Config::base_dir`]. Does not validate; call [`Config::validate`].
    ///
    /// # Errors
    /// [`Error::Config`] whose reason is one of (exact texts in `docs/router.md`):
    /// * ``invalid YAML: <reason> at line L, column C`` (syntax, a key twice);
    /// * ``unknown key `standalone.endpoints[0].adress`: did you mean `address`?``;
    /// * ``unknown value `jsn` at `accessLog.format`: did you mean `json`?``;
    /// * `` `metricsScrapeInterval`: `10` has no unit: did you mean `10s`?``;
    /// * `` `<section>`: ... is not supported yet ...`` for the sections of
    ///   [`UNSUPPORTED_SECTIONS`] (none at the moment);
    /// * `` `<path>`: <reason>`` for a value of the wrong type.
    pub fn from_yaml(path: &Path, text: &str) -> Result<Self> {
        let err = |reason: String| Error::Config {
            path: path.to_owned(),
            reason,
        };
        let value: serde_json::Value = serde_saphyr::from_str(text)
            .map_err(|e| err(kthena_sched::Error::Yaml(Box::new(e)).to_string()))?;
        let mut cfg: Self = match value {
            serde_json::Value::Null => Self::default(),
            serde_json::Value::Object(ref m) => {
                if let Some(reason) = unsupported_section(m) {
                    return Err(err(reason));
                }
                kthena_sched::from_value(&value, "").map_err(|e| err(e.to_string()))?
            }
            _ => {
                return Err(err(
                    "the file must be a mapping of keys (`scheduler:`, `standalone:`, ...)".into(),
                ));
            }
        };
        cfg.file_keys = file_keys(&value);
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if cfg.base_dir.as_os_str().is_empty() {
            cfg.base_dir = PathBuf::from(".");
        }
        if let Some(tls) = &mut cfg.tls {
            for file in [&mut tls.cert_file, &mut tls.key_file] {
                if file.is_relative() {
                    *file = cfg.base_dir.join(&*file);
                }
            }
        }
        Ok(cfg)
    }

    /// Reads and parses a config file (see [`Config::from_yaml`]).
    ///
    /// # Errors
    /// [`Error::ReadFile`] or [`Error::Config`].
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadFile {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(path, &text)
    }

    /// Applies Go Kthena's environment variables under the keys the file sets (see
    /// [`ENV_KEYS`]).
    ///
    /// # Errors
    /// [`Error::Env`] for an unparsable or out-of-range value (never a silent default), and
    /// for `ENABLE_FAIRNESS_SCHEDULING` and `ENABLE_SESSION_BOOST` both set to true (Go
    /// Kthena refuses to start).
    pub fn apply_env(mut self, env: &dyn Env) -> Result<Self> {
        let hidden: Vec<&str> = ENV_KEYS
            .iter()
            .filter(|(key, _)| self.file_keys.contains(key))
            .map(|(_, var)| *var)
            .collect();
        let var = |name: &str| env.var(name).filter(|_| !hidden.contains(&name));
        for s in self.standalone.iter_mut().flat_map(|s| &mut s.secrets) {
            s.env_value = s.env.as_deref().and_then(|n| env.var(n));
        }
        if let Some(v) = var("METRICS_SCRAPE_INTERVAL") {
            let d = parse_go_duration(&v).map_err(|e| Error::Env {
                name: "METRICS_SCRAPE_INTERVAL",
                value: v.clone(),
                reason: e.to_string(),
            })?;
            if d.is_zero() {
                return Err(Error::Env {
                    name: "METRICS_SCRAPE_INTERVAL",
                    value: v,
                    reason: "must be greater than 0".into(),
                });
            }
            self.metrics_scrape_interval = d;
        }
        if let Some(v) = env.var("POD_NAMESPACE").filter(|v| !v.is_empty()) {
            self.gateway_api.namespace.get_or_insert(v);
        }
        if let Some(v) = var("DRAIN_TIMEOUT") {
            self.drain_timeout = parse_go_duration(&v).map_err(|e| Error::Env {
                name: "DRAIN_TIMEOUT",
                value: v.clone(),
                reason: e.to_string(),
            })?;
        }
        if let Some(v) = var("ACCESS_LOG_ENABLED") {
            self.access_log.enabled = match v.to_ascii_lowercase().as_str() {
                "1" | "t" | "true" => true,
                "0" | "f" | "false" => false,
                _ => {
                    return Err(Error::Env {
                        name: "ACCESS_LOG_ENABLED",
                        value: v,
                        reason: "expected true or false".into(),
                    });
                }
            };
        }
        if let Some(v) = var("ACCESS_LOG_FORMAT") {
            self.access_log.format = match v.as_str() {
                "text" => AccessLogFormat::Text,
                "json" => AccessLogFormat::Json,
                _ => {
                    return Err(Error::Env {
                        name: "ACCESS_LOG_FORMAT",
                        value: v,
                        reason: "expected text or json".into(),
                    });
                }
            };
        }
        if let Some(v) = var("ACCESS_LOG_OUTPUT")
            && !v.is_empty()
        {
            self.access_log.output = v;
        }
        self.queue = crate::queue::QueueConfig::from_env(env)?;
        self.on_flight_redis = redis_url_from_env(env);
        Ok(self)
    }

    /// The settings read at start only (listener ports, `bindAddress`, `maxBodyBytes`,
    /// `upstreamIdleTimeout`, `listener`, `accessLog`, `drainTimeout`,
    /// `endpointPicker.address`) that differ in `new`, by their config names: a reload keeps
    /// the running values, so these need a restart.
    #[must_use]
    pub fn start_only_changes(&self, new: &Self) -> Vec<&'static str> {
        [
            ("port", self.port != new.port),
            ("metricsPort", self.metrics_port != new.metrics_port),
            ("debugPort", self.debug_port != new.debug_port),
            ("tls", self.tls != new.tls),
            (
                "exposeMetricsOnRouterPort",
                self.expose_metrics_on_router_port != new.expose_metrics_on_router_port,
            ),
            ("bindAddress", self.bind_address != new.bind_address),
            ("maxBodyBytes", self.max_body_bytes != new.max_body_bytes),
            (
                "upstreamIdleTimeout",
                self.upstream_idle_timeout != new.upstream_idle_timeout,
            ),
            ("listener", self.listener != new.listener),
            ("accessLog", self.access_log != new.access_log),
            ("drainTimeout", self.drain_timeout != new.drain_timeout),
            (
                "endpointPicker.address",
                self.endpoint_picker.address != new.endpoint_picker.address,
            ),
        ]
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
    }

    /// Two listeners configured on one port (0, any free port, never clashes; the debug
    /// listener is on 127.0.0.1, so it clashes only when `bindAddress` covers loopback).
    pub(crate) fn port_clash(&self) -> Option<String> {
        let same = |a: u16, b: u16| a != 0 && a == b;
        let loopback = self.bind_address.is_unspecified()
            || self.bind_address == std::net::IpAddr::from([127, 0, 0, 1]);
        let clash = if same(self.port, self.metrics_port) {
            ("port", "metricsPort", self.port)
        } else if loopback && same(self.debug_port, self.port) {
            ("port", "debugPort", self.port)
        } else if loopback && same(self.debug_port, self.metrics_port) {
            ("metricsPort", "debugPort", self.metrics_port)
        } else {
            return None;
        };
        Some(format!(
            "{} and {} are both {}: each listener needs a port of its own",
            clash.0, clash.1, clash.2
        ))
    }

    /// Checks every value: endpoint names unique and addresses resolvable, ports non-zero
    /// unless the value 0 is meant (tests bind port 0), no two listeners on one port, scrape
    /// interval and timeout > 0, scrape concurrency ≥ 1, the scheduler section valid.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field.
    pub fn validate(self, path: &Path) -> Result<Self> {
        let err = |reason: String| Error::Config {
            path: path.to_owned(),
            reason,
        };
        if self.metrics_scrape_concurrency == 0 {
            return Err(err("metricsScrapeConcurrency: must be at least 1".into()));
        }
        // A zero interval would panic the scrape loop's timer; a zero timeout fails every scrape.
        if self.metrics_scrape_interval.is_zero() {
            return Err(err("metricsScrapeInterval: must be greater than 0".into()));
        }
        if self.metrics_scrape_timeout.is_zero() {
            return Err(err("metricsScrapeTimeout: must be greater than 0".into()));
        }
        if self.max_body_bytes == 0 {
            return Err(err("maxBodyBytes: must be at least 1".into()));
        }
        if let Some(reason) = self.port_clash() {
            return Err(err(reason));
        }
        self.listener.validate().map_err(err)?;
        self.kv_cache.validate().map_err(err)?;
        self.cold_start.validate().map_err(err)?;
        if self.endpoint_picker.max_endpoints == 0 {
            return Err(err("endpointPicker.maxEndpoints: must be at least 1".into()));
        }
        let a = &self.auth;
        if !a.jwks_uri.is_empty() {
            if !(a.jwks_uri.starts_with("http://") || a.jwks_uri.starts_with("https://"))
                || a.jwks_uri.parse::<http::Uri>().is_err()
            {
                return Err(err(format!(
                    "auth.jwksUri: `{}` is not an http:// or https:// URL",
                    a.jwks_uri
                )));
            }
            if a.jwks_refresh_interval.is_zero() || a.jwks_retry_interval.is_zero() {
                return Err(err(
                    "auth.jwksRefreshInterval and auth.jwksRetryInterval must be greater than 0"
                        .into(),
                ));
            }
        }
        if self.gateway_api.inference_extension && !self.gateway_api.enabled {
            return Err(err(
                "gatewayApi.inferenceExtension: requires gatewayApi.enabled (--enable-gateway-api)"
                    .into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, ep) in self.endpoints().iter().enumerate() {
            if ep.name.is_empty() {
                return Err(err(format!(
                    "standalone.endpoints[{i}].name: must not be empty"
                )));
            }
            if !seen.insert(ep.name.as_str()) {
                return Err(err(format!(
                    "standalone.endpoints[{i}].name: duplicate endpoint name {:?}",
                    ep.name
                )));
            }
            resolve_address(&ep.address)
                .map_err(|r| err(format!("standalone.endpoints[{i}].address: {r}")))?;
        }
        crate::sched::build_scheduler(&self.scheduler).map_err(|e| err(e.to_string()))?;
        Ok(self)
    }

    /// Whether the config has no `standalone` section: discovery from the Kubernetes API.
    #[must_use]
    pub fn is_cluster_mode(&self) -> bool {
        self.standalone.is_none()
    }

    /// `standalone.secrets` (empty in cluster mode).
    #[must_use]
    pub fn secrets(&self) -> &[crate::provider::SecretSource] {
        self.standalone.as_ref().map_or(&[], |s| &s.secrets)
    }

    /// `standalone.endpoints` (empty in cluster mode).
    #[must_use]
    pub fn endpoints(&self) -> &[EndpointConfig] {
        self.standalone.as_ref().map_or(&[], |s| &s.endpoints)
    }

    /// The manifest paths with relative ones resolved against [`Config::base_dir`] (none
    /// in cluster mode).
    #[must_use]
    pub fn manifest_paths(&self) -> Vec<PathBuf> {
        self.standalone
            .iter()
            .flat_map(|s| &s.manifests)
            .map(|p| {
                if p.is_absolute() {
                    p.clone()
                } else {
                    self.base_dir.join(p)
                }
            })
            .collect()
    }
}

/// Resolves an endpoint address `host:port` to a socket address.
///
/// # Errors
/// [`Error::BadAddress`] when the address has no port or its host lookup fails,
/// [`Error::AddressUnresolved`] when it resolves to nothing.
pub fn resolve_address(address: &str) -> Result<SocketAddr> {
    if let Ok(a) = address.parse::<SocketAddr>() {
        return Ok(a);
    }
    address
        .to_socket_addrs()
        .map_err(|source| Error::BadAddress {
            address: address.to_owned(),
            source,
        })?
        .next()
        .ok_or_else(|| Error::AddressUnresolved {
            address: address.to_owned(),
        })
}

/// The Redis URL of Go Kthena's `REDIS_HOST`, `REDIS_PORT` (6379), `REDIS_PASSWORD`, DB 0;
/// `None` without `REDIS_HOST`.
pub(crate) fn redis_url_from_env(env: &dyn Env) -> Option<String> {
    let host = env.var("REDIS_HOST").filter(|h| !h.is_empty())?;
    let port = env
        .var("REDIS_PORT")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "6379".into());
    let auth = env
        .var("REDIS_PASSWORD")
        .filter(|p| !p.is_empty())
        .map(|p| format!(":{p}@"))
        .unwrap_or_default();
    Some(format!("redis://{auth}{host}:{port}/0"))
}

/// Top-level sections of Go Kthena features this router does not have yet, with the reason
/// given when a config holds one (never silently ignored: an ignored `auth:` would leave the
/// router open where the user asked for JWT).
pub const UNSUPPORTED_SECTIONS: &[(&str, &str)] = &[];

/// Go Kthena's switches of features this router does not have yet: set to true they are
/// errors (the tuning variables such as `FAIRNESS_WINDOW_SIZE` stay harmless).
fn unsupported_section(m: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    UNSUPPORTED_SECTIONS
        .iter()
        .find(|(k, _)| m.contains_key(*k))
        .map(|(k, why)| format!("`{k}`: {why}"))
}

#[cfg(test)]
mod tests;
