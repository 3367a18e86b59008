//! The crate's error type.

use std::net::SocketAddr;

/// Errors of the simulator library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of range.
    #[error("invalid --{} (config field `{field}`): {reason}", field.replace('_', "-"))]
    Config {
        /// Field name as in the config struct.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Binding a listening socket failed.
    #[error("cannot bind {addr}")]
    Bind {
        /// Address we tried to bind.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The ZMQ publisher could not be set up.
    #[error("cannot bind the KV-event publisher on {endpoint}")]
    KvEvents {
        /// The ZMQ endpoint.
        endpoint: String,
        /// The ZMQ error.
        #[source]
        source: zeromq::ZmqError,
    },
    /// Loading a tokenizer file failed.
    #[error("cannot load tokenizer {path}: {reason}")]
    Tokenizer {
        /// File path.
        path: String,
        /// The tokenizers crate's message.
        reason: String,
    },
    /// No loopback address has the port free (simulated node).
    #[error("no free loopback address for port {port}")]
    NoAddress {
        /// The port the engine must listen on.
        port: u16,
    },
}
