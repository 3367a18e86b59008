//! The `kthena-controller` command line: this controller's flags and every flag Go Kthena's
//! chart gives Go's controller-manager (`cmd/kthena-controller-manager/main.go` at v1.0.0
//! and `charts/kthena/charts/workload/templates/kthena-controller-manager/component/deployment.yaml`),
//! in Go's forms: a bool flag is `--x`, `--x=true` or `--x=false` (any value of Go's
//! `strconv.ParseBool`), `--controllers` is Go's comma list, and klog's `--v=N` sets the
//! log level; a flag given twice takes its last value, as Go's `pflag`.
//! `docs/controller.md` lists what each does.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{ArgAction, Parser};

use crate::manager::ControllerSet;
use crate::webhook;

/// Kthena controller manager: reconciles ModelServings into pods and headless services.
#[derive(Debug, Clone, Parser)]
#[command(name = "kthena-controller", version, args_override_self = true)]
pub struct Flags {
    /// Path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the API server; overrides the kubeconfig's server.
    #[arg(long)]
    pub master: Option<String>,
    /// ModelServings reconciled concurrently.
    #[arg(long, default_value_t = 5)]
    pub workers: u16,
    /// Controllers to run: `*` for all, `-name` disables, `+name` wins (modelserving,
    /// modelbooster, autoscaler).
    #[arg(long, default_value = "*")]
    pub controllers: String,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Run the controllers only while holding the Lease `lease.kthena.controller-manager`
    /// (duration 15 s, renewed every 2 s); exit when it is lost.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          default_value = "false", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (default: the namespace of the service account
    /// in a cluster, else of the kubeconfig context).
    #[arg(long)]
    pub leader_elect_namespace: Option<String>,
    /// Address of the plain-HTTP `GET /healthz` endpoint (`--health-probe-bind-address`,
    /// controller-runtime's name, is the same flag); Go's `:8081` form means all addresses.
    #[arg(
        long,
        alias = "health-probe-bind-address",
        default_value = "0.0.0.0:8081",
        value_parser = parse_bind_address
    )]
    pub healthz_bind_address: SocketAddr,
    /// Serve the admission webhooks (TLS, on --port) for every Kthena kind.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          default_value = "true", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub enable_webhook: bool,
    /// Port of the TLS webhook server (0 picks a free port).
    #[arg(long, default_value_t = 8443)]
    pub port: u16,
    /// IP address the TLS webhook server listens on, with --port (default: all interfaces,
    /// as Go's `:8443`).
    #[arg(long, default_value = "0.0.0.0")]
    pub webhook_bind_address: std::net::IpAddr,
    /// Read and write timeout of the webhook server: seconds (Go's form, `30`) or a Go
    /// duration (`30s`, `1m`).
    #[arg(long, default_value = "30", value_parser = parse_timeout)]
    pub webhook_timeout: std::time::Duration,
    /// Average requests per second to the API server (up to --kube-api-burst at once); 0: no
    /// client-side limit.
    #[arg(long, default_value_t = 0.0)]
    pub kube_api_qps: f64,
    /// Requests that may go to the API server at once above --kube-api-qps (at least 1 when
    /// a QPS is set); 0 with a QPS: the QPS rounded up.
    #[arg(long, default_value_t = 0)]
    pub kube_api_burst: u32,
    /// Webhook serving certificate (PEM); with --tls-private-key-file, used when both files
    /// exist, else the certificate of --cert-secret-name (generated at start if missing).
    #[arg(long, default_value = "/etc/tls/tls.crt")]
    pub tls_cert_file: PathBuf,
    /// Private key of --tls-cert-file (PEM).
    #[arg(long, default_value = "/etc/tls/tls.key")]
    pub tls_private_key_file: PathBuf,
    /// Secret (in the controller's namespace) that shares the generated webhook certificate
    /// between replicas; created when missing; empty: each replica generates its own.
    #[arg(long, default_value = webhook::CERT_SECRET_NAME)]
    pub cert_secret_name: String,
    /// Seconds between two rounds of the autoscaler controller; 0: the default, 15 (as
    /// Go's chart `autoscalingSyncPeriodSeconds`).
    #[arg(long, default_value_t = 15)]
    pub autoscaling_sync_period_seconds: u64,
    /// `<namespace>/<name>` of the Service in front of the routers' metrics listeners (the
    /// chart's `kthena-router-metrics`): the autoscaler scrapes every ready endpoint of it for
    /// held requests and idle ModelServers, to scale targets with `minReplicas: 0` to zero and
    /// back. Unset: no target goes to zero. Not a Go Kthena flag.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub router_metrics_service: Option<crate::autoscaler::RouterMetrics>,
    /// Webhook Service name, for the generated certificate's DNS names.
    #[arg(long, default_value = webhook::SERVICE_NAME)]
    pub service_name: String,
    /// Port on 127.0.0.1 of `GET /debug/modelserving/cache` (the ServingGroup/Role view as
    /// JSON); 0 = off.
    #[arg(long, default_value_t = 0)]
    pub debug_port: u16,
    /// klog's verbosity (Go's chart passes `--v=2` in `controllerManager.image.args`):
    /// 0-3 log at `info`, 4-5 at `debug`, 6 and above at `trace` (`RUST_LOG`, when set,
    /// wins).
    #[arg(long, value_name = "LEVEL")]
    pub v: Option<u8>,
    /// Go's other klog flags (`--vmodule`, `--logtostderr`, `--log_dir`, ...): accepted,
    /// ignored (logs go to stdout).
    #[arg(long = "klog", hide = true, num_args = 0..=1, value_name = "VALUE",
          default_missing_value = "true",
          alias = "vmodule", alias = "logtostderr", alias = "alsologtostderr",
          alias = "log_dir", alias = "log_file", alias = "log_file_max_size",
          alias = "one_output", alias = "skip_headers", alias = "skip_log_headers",
          alias = "stderrthreshold", alias = "add_dir_header",
          alias = "legacy_stderr_threshold_behavior", action = ArgAction::Append)]
    pub klog: Vec<String>,
}

/// `--webhook-timeout`: whole seconds, as Go's flag, or a Go duration.
fn parse_timeout(text: &str) -> std::result::Result<std::time::Duration, String> {
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    kthena_api::GoDuration::new(text)
        .parse()
        .map_err(|e| e.to_string())
}

/// A listen address as Go's `net.Listen` takes it: `host:port`, or `:port` for all
/// addresses (controller-runtime's `--health-probe-bind-address=:8081`).
///
/// # Errors
/// Text that is neither, with the accepted forms.
pub fn parse_bind_address(text: &str) -> std::result::Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse()
        .map_err(|_| format!("invalid address {text:?}: expected host:port or :port"))
}

/// A bool flag value as Go's `strconv.ParseBool` reads it: `1`, `t`, `T`, `TRUE`, `true`,
/// `True`, `0`, `f`, `F`, `FALSE`, `false`, `False`.
///
/// # Errors
/// Any other text, with the accepted values.
pub fn parse_go_bool(text: &str) -> std::result::Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {text:?}: expected true or false")),
    }
}

impl Flags {
    /// The log filter: `RUST_LOG` when set, else the level of `--v` (default `info`):
    /// 0-3 `info` (Go logs its normal operation at `V(2)`), 4-5 `debug`, 6+ `trace`.
    #[must_use]
    pub fn log_filter(&self, rust_log: Option<&str>) -> String {
        if let Some(filter) = rust_log.filter(|s| !s.is_empty()) {
            return filter.to_owned();
        }
        match self.v.unwrap_or(0) {
            0..=3 => "info",
            4 | 5 => "debug",
            _ => "trace",
        }
        .to_owned()
    }

    /// The controllers of `--controllers`. As Go's `parseControllers`, a list that enables
    /// none (`""`, or every controller disabled) enables all of them.
    ///
    /// # Errors
    /// [`crate::Error::UnknownController`] for a name Go does not know.
    pub fn controller_set(&self) -> crate::Result<ControllerSet> {
        let set = ControllerSet::parse(&self.controllers)?;
        if set.modelserving || set.modelbooster || set.autoscaler {
            return Ok(set);
        }
        ControllerSet::parse("*")
    }

    /// Seconds between two autoscaler rounds: `--autoscaling-sync-period-seconds`, 0 for
    /// Go's default of 15.
    #[must_use]
    pub fn autoscaling_sync_period(&self) -> std::time::Duration {
        match self.autoscaling_sync_period_seconds {
            0 => std::time::Duration::from_secs(15),
            n => std::time::Duration::from_secs(n),
        }
    }

    /// The namespace of the webhook certificate's Secret and Service names: Go's
    /// `POD_NAMESPACE` (`pod_namespace`, set by the chart from the downward API) when set,
    /// else the client's default namespace.
    #[must_use]
    pub fn webhook_namespace<'a>(
        pod_namespace: Option<&'a str>,
        client_default: &'a str,
    ) -> &'a str {
        pod_namespace
            .filter(|ns| !ns.is_empty())
            .unwrap_or(client_default)
    }
}

#[cfg(test)]
mod tests;
