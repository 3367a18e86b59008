//! `kthena-memnet`: an in-memory network for running engines, a router and a load generator
//! in one process on one clock.
//!
//! A [`MemNet`] is a registry of listeners keyed by [`SocketAddr`], of publish/subscribe
//! topics keyed by endpoint text (`tcp://10.0.0.1:5557`) and of request/reply endpoints keyed
//! the same way ([`MemNet::respond`], [`MemNet::request`]: one request, every reply message
//! back at once, as a KV-event replay socket answers). Connections are
//! [`tokio::io::DuplexStream`] pairs and messages are `Vec<Bytes>` frames on unbounded
//! channels, so every wake-up is a tokio waker and nothing waits on the operating system.
//! On a current-thread runtime with paused time (`tokio::time::pause`), the clock then
//! advances only when every task is waiting on a timer, and a run's result depends on its
//! inputs alone, not on how busy the machine is.
//!
//! [`Connector`] is a hyper-util client connector for either TCP or a [`MemNet`] (never both,
//! so a client on a virtual clock cannot wait on a real socket), so a client type does not
//! change between the two modes.
//!
//! Addresses and topics match exactly: there is no wildcard address (a listener at
//! `0.0.0.0:80` does not take connections to `127.0.0.1:80`) and no name resolution
//! (`tcp://localhost:5557` is not `tcp://127.0.0.1:5557`).
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
//! let net = kthena_memnet::MemNet::new();
//! let addr = "10.0.0.1:8000".parse()?;
//! let mut listener = net.listen(addr)?;
//! let mut client = net.connect(addr)?;
//! client.write_all(b"ping").await?;
//! let mut server = listener.accept().await.ok_or("closed")?;
//! let mut buf = [0u8; 4];
//! server.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"ping");
//! # Ok(()) }
//! ```

mod connector;
mod error;
mod net;

pub use connector::{Conn, Connector};
pub use error::Error;
pub use net::{BUFFER_BYTES, MemListener, MemNet, Publisher, Request, Responder, Subscriber};
