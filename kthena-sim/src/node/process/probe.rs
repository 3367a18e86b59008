//! A container's readinessProbe, run by the node against the pod IP.
//!
//! `httpGet` with scheme HTTP: success is a status in 200..400 within the probe's timeout.
//! `httpGet` with scheme HTTPS and `tcpSocket`: success is an accepted TCP connection (the
//! node does not speak TLS to the pod). `exec` and `grpc` probes are not run: the container
//! counts as ready. The node probes at its own health interval, not `periodSeconds`, and
//! ignores `initialDelaySeconds` and thresholds (one result decides).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Kubernetes' default `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// A readiness probe as the node runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probe {
    /// `GET path` over plain HTTP.
    Http {
        /// The port.
        port: u16,
        /// Request path.
        path: String,
        /// `host` of the probe (the pod IP when unset).
        host: Option<String>,
        /// `httpHeaders`.
        headers: Vec<(String, String)>,
        /// `timeoutSeconds`.
        timeout: Duration,
    },
    /// A TCP connection (`tcpSocket`, or an HTTPS `httpGet`).
    Tcp {
        /// The port.
        port: u16,
        /// `host` of the probe (the pod IP when unset).
        host: Option<String>,
        /// `timeoutSeconds`.
        timeout: Duration,
    },
}

/// The readinessProbe of `c` the node runs, if any (a named port is looked up in the
/// container's ports; an unknown name or an `exec`/`grpc` probe gives `None`).
pub(super) fn readiness(c: &Container) -> Option<Probe> {
    let probe = c.readiness_probe.as_ref()?;
    let timeout = probe
        .timeout_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let port = |p: &IntOrString| match p {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .and_then(|cp| u16::try_from(cp.container_port).ok()),
    };
    if let Some(get) = &probe.http_get {
        let host = get.host.clone().filter(|h| !h.is_empty());
        let port = port(&get.port)?;
        if get.scheme.as_deref() == Some("HTTPS") {
            return Some(Probe::Tcp {
                port,
                host,
                timeout,
            });
        }
        return Some(Probe::Http {
            port,
            path: get.path.clone().unwrap_or_else(|| "/".to_owned()),
            host,
            headers: get
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
            timeout,
        });
    }
    let tcp = probe.tcp_socket.as_ref()?;
    Some(Probe::Tcp {
        port: port(&tcp.port)?,
        host: tcp.host.clone().filter(|h| !h.is_empty()),
        timeout,
    })
}

/// Runs `probe` against the pod at `ip`; true on success.
pub(super) async fn check(probe: &Probe, ip: IpAddr) -> bool {
    match probe {
        Probe::Http {
            port,
            path,
            host,
            headers,
            timeout,
        } => {
            let authority = authority(host.as_deref(), ip, *port);
            let mut req = http::Request::get(format!("http://{authority}{path}"));
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let Ok(req) = req.body(Empty::<Bytes>::new()) else {
                return false;
            };
            let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
            matches!(
                tokio::time::timeout(*timeout, client.request(req)).await,
                Ok(Ok(resp)) if (200..400).contains(&resp.status().as_u16())
            )
        }
        Probe::Tcp {
            port,
            host,
            timeout,
        } => {
            let authority = authority(host.as_deref(), ip, *port);
            matches!(
                tokio::time::timeout(*timeout, tokio::net::TcpStream::connect(authority)).await,
                Ok(Ok(_))
            )
        }
    }
}

fn authority(host: Option<&str>, ip: IpAddr, port: u16) -> String {
    match host {
        Some(h) => match h.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port).to_string(),
            Err(_) => format!("{h}:{port}"),
        },
        None => SocketAddr::new(ip, port).to_string(),
    }
}
