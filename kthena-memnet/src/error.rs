//! The crate's error type.

use std::net::SocketAddr;

/// What can go wrong on a [`crate::MemNet`] or its [`crate::Connector`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A listener is already registered at this address.
    #[error("address {0} is already in use on the in-memory network")]
    AddrInUse(SocketAddr),
    /// No listener is registered at this address (or it was dropped).
    #[error("connection refused: nothing listens at {0} on the in-memory network")]
    ConnectionRefused(SocketAddr),
    /// A responder is already registered at this request/reply endpoint.
    #[error("endpoint {0} already has a responder on the in-memory network")]
    EndpointInUse(String),
    /// No responder answers at this request/reply endpoint (or it was dropped).
    #[error("nothing answers at {0} on the in-memory network")]
    NoResponder(String),
    /// A client URI that is not `http://` with an IP address (and a port, 80 by default).
    #[error("the in-memory network needs an http:// URI with an IP address and port, got `{0}`")]
    NoSocketAddr(http::Uri),
    /// The TCP connector's error (hyper-util's `ConnectError`, which it does not export).
    #[error("{0}")]
    Tcp(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = match &e {
            Error::AddrInUse(_) => std::io::ErrorKind::AddrInUse,
            Error::ConnectionRefused(_) | Error::NoResponder(_) => {
                std::io::ErrorKind::ConnectionRefused
            }
            Error::EndpointInUse(_) => std::io::ErrorKind::AddrInUse,
            Error::NoSocketAddr(_) => std::io::ErrorKind::InvalidInput,
            Error::Tcp(_) => std::io::ErrorKind::Other,
        };
        Self::new(kind, e)
    }
}
