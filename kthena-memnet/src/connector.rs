//! A hyper-util client connector for TCP or a [`MemNet`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::net::TcpStream;

use crate::{Error, MemNet};

/// Where a client's connections go: TCP (hyper-util's [`HttpConnector`]) or an in-memory
/// network, never both, so that a client on a virtual clock cannot wait on a real socket.
#[derive(Debug, Clone)]
pub enum Connector {
    /// Real TCP connections.
    Tcp(HttpConnector),
    /// Connections to listeners of this network, by the URI's IP address and port (port 80
    /// when absent); an address nothing listens at is refused.
    Memory(MemNet),
}

impl Connector {
    /// A TCP connector.
    #[must_use]
    pub fn tcp(http: HttpConnector) -> Self {
        Self::Tcp(http)
    }

    /// A connector into `net`.
    #[must_use]
    pub fn memory(net: MemNet) -> Self {
        Self::Memory(net)
    }
}

/// The socket address a URI names, when its host is an IP literal.
fn socket_addr(uri: &http::Uri) -> Option<SocketAddr> {
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: std::net::IpAddr = host.parse().ok()?;
    let port = uri.port_u16().unwrap_or(80);
    Some(SocketAddr::new(ip, port))
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = Conn;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        match self {
            Self::Tcp(c) => c.poll_ready(cx).map_err(|e| Error::Tcp(Box::new(e))),
            Self::Memory(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        match self {
            Self::Tcp(c) => {
                let fut = c.call(uri);
                Box::pin(async move {
                    fut.await
                        .map(Conn::Tcp)
                        .map_err(|e| Error::Tcp(Box::new(e)))
                })
            }
            Self::Memory(net) => {
                let res = match socket_addr(&uri) {
                    _ if uri.scheme_str() != Some("http") => Err(Error::NoSocketAddr(uri)),
                    Some(addr) => net.connect(addr).map(|s| Conn::Memory(TokioIo::new(s))),
                    None => Err(Error::NoSocketAddr(uri)),
                };
                Box::pin(std::future::ready(res))
            }
        }
    }
}

/// A client connection made by [`Connector`].
#[derive(Debug)]
pub enum Conn {
    /// Over TCP.
    Tcp(TokioIo<TcpStream>),
    /// Over a [`MemNet`].
    Memory(TokioIo<DuplexStream>),
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Self::Tcp(s) => s.connected(),
            Self::Memory(_) => Connected::new(),
        }
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Memory(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Memory(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Memory(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Memory(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(s) => s.is_write_vectored(),
            Self::Memory(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Memory(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    #[test]
    fn uris_name_socket_addresses() {
        let a = |s: &str| socket_addr(&s.parse().unwrap());
        assert_eq!(
            a("http://10.0.0.1:8000/v1"),
            Some("10.0.0.1:8000".parse().unwrap())
        );
        assert_eq!(a("http://10.0.0.1/x"), Some("10.0.0.1:80".parse().unwrap()));
        assert_eq!(a("http://[::1]:9/"), Some("[::1]:9".parse().unwrap()));
        assert_eq!(a("http://engine:8000/"), None);
    }

    #[tokio::test]
    async fn only_http_uris_with_ip_addresses_are_connected() {
        use tower_service::Service as _;
        let net = MemNet::new();
        let _l = net.listen("10.0.0.1:443".parse().unwrap()).unwrap();
        let mut c = Connector::memory(net);
        for uri in ["https://10.0.0.1:443/", "http://engine:443/"] {
            let err = c.call(uri.parse().unwrap()).await.unwrap_err();
            assert!(matches!(err, Error::NoSocketAddr(_)), "{uri}: {err}");
        }
        assert!(
            c.call("http://10.0.0.1:443/".parse().unwrap())
                .await
                .is_ok()
        );
    }

    /// A hyper client reaches a hyper server over the in-memory network, keeps the
    /// connection alive for the next request, and gets a refusal for an address nothing
    /// listens at.
    #[tokio::test(start_paused = true)]
    async fn a_hyper_client_talks_http_to_a_server_on_the_network() {
        let net = MemNet::new();
        let mut l = net.listen("10.0.0.1:8000".parse().unwrap()).unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&accepted);
        let mut server = tokio::task::JoinSet::new();
        server.spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Some(s) = l.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let svc = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(req.uri().path().to_owned()),
                        )))
                    },
                );
                conns.spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc),
                );
            }
        });
        let client: Client<Connector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build(Connector::memory(net));
        for path in ["/a", "/b"] {
            let resp = client
                .get(format!("http://10.0.0.1:8000{path}").parse().unwrap())
                .await
                .unwrap();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, path.as_bytes());
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::Relaxed), 1);
        let err = client
            .get("http://10.0.0.2:8000/".parse().unwrap())
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err:?}");
    }
}
