//! `GET /healthz`.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::error::{Error, Result};

/// Binds `addr` and returns the bound address and a future serving `GET /healthz` (200,
/// body `ok`) until it is dropped.
///
/// # Errors
/// [`Error::Listen`] if the address cannot be bound.
pub async fn serve_health(addr: SocketAddr) -> Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| Error::Listen { addr, source })?;
    let app = Router::new().route("/healthz", get(|| async { "ok" }));
    Ok((local, async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "health server stopped");
        }
    }))
}

#[cfg(test)]
mod tests;
