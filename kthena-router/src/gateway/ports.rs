//! The TCP listeners of Gateway listener ports other than the router's own (Go Kthena opens
//! one per port of every `kthena-router` Gateway): opened when a served Gateway first lists
//! the port, closed (draining like the main listener) when none does any more. A port that
//! cannot be bound is retried on every later change; its error reaches the Gateway status
//! (`Programmed=False`, listener `PortUnavailable`).

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the router's inference service on a bound Gateway listener socket (the `u16` is
/// its port, for [`super::ListenerPort`]) until the token is cancelled.
pub(crate) type ServePort = Arc<dyn Fn(TcpListener, u16, CancellationToken) + Send + Sync>;

/// How the router serves Gateway listeners.
#[derive(Clone)]
pub(crate) struct Serving {
    /// The router's main inference port (served already; never opened here).
    pub(crate) port: u16,
    /// The address every listener binds (`bindAddress`).
    pub(crate) bind: IpAddr,
    /// Starts serving an opened port.
    pub(crate) serve: ServePort,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("port", &self.port)
            .field("bind", &self.bind)
            .finish_non_exhaustive()
    }
}

/// The opened ports and the ones that failed.
#[derive(Debug, Default)]
pub(crate) struct Ports {
    open: HashMap<u16, CancellationToken>,
    errors: HashMap<u16, String>,
}

impl Ports {
    /// Opens the `wanted` ports not open yet (retrying failed ones) and closes the open
    /// ports no longer wanted; returns the ports that could not be opened, with the reason
    /// (`listen tcp <addr>: <error>`, as Go's `net.Listen` words it).
    pub(crate) fn reconcile(
        &mut self,
        wanted: &BTreeSet<u16>,
        serving: &Serving,
        cancel: &CancellationToken,
    ) -> HashMap<u16, String> {
        self.open.retain(|port, token| {
            let keep = wanted.contains(port);
            if !keep {
                tracing::info!(port, "Closing a Gateway listener port");
                token.cancel();
            }
            keep
        });
        self.errors.retain(|port, _| wanted.contains(port));
        for &port in wanted {
            if port == serving.port || self.open.contains_key(&port) {
                continue;
            }
            let addr = SocketAddr::new(serving.bind, port);
            match crate::server::listener::bind(addr) {
                Ok(l) => {
                    tracing::info!(%addr, "Serving a Gateway listener port");
                    let token = cancel.child_token();
                    (serving.serve)(l, port, token.clone());
                    self.open.insert(port, token);
                    self.errors.remove(&port);
                }
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "Cannot open a Gateway listener port");
                    self.errors.insert(port, format!("listen tcp {addr}: {e}"));
                }
            }
        }
        self.errors.clone()
    }
}
