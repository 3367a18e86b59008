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
mod tests;
