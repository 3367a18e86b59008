//! Command-line overrides of the config file, and loading a config the way the binary does
//! (file, environment, flags, validation), on start and on every reload.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::config::env::Env;
use crate::error::Result;

/// Command-line overrides re-applied on every config reload (flags beat the file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--port`.
    pub port: Option<u16>,
    /// `--metrics-port`.
    pub metrics_port: Option<u16>,
    /// `--debug-port`.
    pub debug_port: Option<u16>,
    /// `--header-read-timeout`.
    pub header_read_timeout: Option<Duration>,
    /// `--body-read-idle-timeout`.
    pub body_read_idle_timeout: Option<Duration>,
    /// `--body-read-timeout`.
    pub body_read_timeout: Option<Duration>,
    /// `--max-connections` (per listener).
    pub max_connections: Option<usize>,
    /// `--tcp-keepalive`.
    pub tcp_keepalive: Option<Duration>,
    /// `--max-in-flight`.
    pub max_in_flight: Option<usize>,
    /// `--max-in-flight-per-endpoint`.
    pub max_in_flight_per_endpoint: Option<u32>,
    /// `--breaker-failures`.
    pub breaker_failures: Option<u32>,
    /// `--breaker-cool-down`.
    pub breaker_cool_down: Option<Duration>,
    /// `--enable-gateway-api`.
    pub enable_gateway_api: bool,
    /// `--enable-gateway-api-inference-extension`.
    pub enable_gateway_api_inference_extension: bool,
    /// `--epp` (the endpoint picker's gRPC address).
    pub epp: Option<SocketAddr>,
    /// `--epp-max-endpoints`.
    pub epp_max_endpoints: Option<usize>,
    /// `--expose-metrics-on-router-port` (`Some(false)` turns off the file's
    /// `exposeMetricsOnRouterPort`).
    pub expose_metrics_on_router_port: Option<bool>,
}

impl Overrides {
    /// Applies the flags to a config.
    #[must_use]
    pub fn apply(self, mut cfg: Config) -> Config {
        if let Some(p) = self.port {
            cfg.port = p;
        }
        if let Some(p) = self.metrics_port {
            cfg.metrics_port = p;
        }
        if let Some(p) = self.debug_port {
            cfg.debug_port = p;
        }
        let l = &mut cfg.listener;
        l.header_read_timeout = self.header_read_timeout.unwrap_or(l.header_read_timeout);
        l.body_read_idle_timeout = self
            .body_read_idle_timeout
            .unwrap_or(l.body_read_idle_timeout);
        l.body_read_timeout = self.body_read_timeout.unwrap_or(l.body_read_timeout);
        l.max_connections = self.max_connections.unwrap_or(l.max_connections);
        l.tcp_keepalive = self.tcp_keepalive.unwrap_or(l.tcp_keepalive);
        let o = &mut cfg.overload;
        o.max_in_flight = self.max_in_flight.unwrap_or(o.max_in_flight);
        o.max_in_flight_per_endpoint = self
            .max_in_flight_per_endpoint
            .unwrap_or(o.max_in_flight_per_endpoint);
        o.breaker_failures = self.breaker_failures.unwrap_or(o.breaker_failures);
        o.breaker_cool_down = self.breaker_cool_down.unwrap_or(o.breaker_cool_down);
        cfg.gateway_api.enabled |= self.enable_gateway_api;
        cfg.gateway_api.inference_extension |= self.enable_gateway_api_inference_extension;
        let e = &mut cfg.endpoint_picker;
        e.address = self.epp.or(e.address);
        e.max_endpoints = self.epp_max_endpoints.unwrap_or(e.max_endpoints);
        if let Some(on) = self.expose_metrics_on_router_port {
            cfg.expose_metrics_on_router_port = on;
        }
        cfg
    }
}

/// Loads a config file the way the binary does: file, then environment, then flags, then
/// validation.
///
/// # Errors
/// [`Error::ReadFile`](crate::Error::ReadFile), [`Error::Config`](crate::Error::Config) or
/// [`Error::Env`](crate::Error::Env).
pub fn load_config(path: &Path, env: &dyn Env, overrides: Overrides) -> Result<Config> {
    let cfg = Config::load(path)?.apply_env(env)?;
    let file_clash = cfg.port_clash();
    let cfg = overrides.apply(cfg);
    if file_clash.is_none()
        && let Some(clash) = cfg.port_clash()
    {
        // The file alone was fine: the clash comes from the flags, so say so.
        let flags: Vec<String> = [
            ("--port", overrides.port),
            ("--metrics-port", overrides.metrics_port),
            ("--debug-port", overrides.debug_port),
        ]
        .into_iter()
        .filter_map(|(flag, p)| p.map(|p| format!("{flag} {p}")))
        .collect();
        return Err(crate::Error::Config {
            path: path.to_owned(),
            reason: format!("with the flags {}: {clash}", flags.join(", ")),
        });
    }
    cfg.validate(path)
}

/// Loads the configuration without a file, as Go's router without its ConfigMap: the
/// built-in defaults (cluster mode, Go's default scheduler), then the environment, then the
/// flags, then validation.
///
/// # Errors
/// [`Error::Env`](crate::Error::Env), or [`Error::Config`](crate::Error::Config) (with an
/// empty path) for flags that clash.
pub fn load_defaults(env: &dyn Env, overrides: Overrides) -> Result<Config> {
    let cfg = overrides.apply(Config::default().apply_env(env)?);
    cfg.validate(Path::new(""))
}

#[cfg(test)]
mod tests;
