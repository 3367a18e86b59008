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
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::serve_health;

    #[tokio::test]
    async fn healthz_answers_ok() -> crate::testutil::TestResult {
        let (addr, server) = serve_health("127.0.0.1:0".parse()?).await?;
        let client = async {
            let mut conn = tokio::net::TcpStream::connect(addr).await?;
            conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await?;
            let mut out = String::new();
            conn.read_to_string(&mut out).await?;
            Ok::<_, Box<dyn std::error::Error>>(out)
        };
        let out = tokio::select! {
            () = server => return Err("server stopped".into()),
            out = client => out?,
        };
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("\r\n\r\nok"), "{out}");
        Ok(())
    }
}
