//! The in-memory network: listeners, connections, publish/subscribe topics and
//! request/reply endpoints.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::io::DuplexStream;
use tokio::sync::{mpsc, oneshot};

use crate::Error;

/// Bytes buffered in each direction of an in-memory connection before a writer waits
/// (256 KiB, about what a loopback TCP socket buffers).
pub const BUFFER_BYTES: usize = 256 * 1024;

/// A registry of in-memory listeners and topics. Cloning it gives another handle to the
/// same network.
#[derive(Clone, Default)]
pub struct MemNet {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    listeners: BTreeMap<SocketAddr, mpsc::UnboundedSender<DuplexStream>>,
    topics: BTreeMap<String, Vec<mpsc::UnboundedSender<Vec<Bytes>>>>,
    responders: BTreeMap<String, mpsc::UnboundedSender<Request>>,
}

impl std::fmt::Debug for MemNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.lock();
        f.debug_struct("MemNet")
            .field("listeners", &g.listeners.keys().collect::<Vec<_>>())
            .field("topics", &g.topics.keys().collect::<Vec<_>>())
            .field("responders", &g.responders.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl MemNet {
    /// An empty network.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Listens at `addr` until the returned listener is dropped.
    ///
    /// # Errors
    /// [`Error::AddrInUse`] while another listener holds `addr`.
    pub fn listen(&self, addr: SocketAddr) -> Result<MemListener, Error> {
        let mut g = self.lock();
        if g.listeners.get(&addr).is_some_and(|tx| !tx.is_closed()) {
            return Err(Error::AddrInUse(addr));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        g.listeners.insert(addr, tx);
        Ok(MemListener {
            addr,
            rx,
            net: self.clone(),
        })
    }

    /// Whether a listener is registered at `addr`.
    #[must_use]
    pub fn is_listening(&self, addr: SocketAddr) -> bool {
        self.lock()
            .listeners
            .get(&addr)
            .is_some_and(|tx| !tx.is_closed())
    }

    /// Opens a connection to the listener at `addr`: the client half is returned, the
    /// server half waits in the listener's accept queue. Each direction buffers
    /// [`BUFFER_BYTES`].
    ///
    /// # Errors
    /// [`Error::ConnectionRefused`] when nothing listens at `addr`.
    pub fn connect(&self, addr: SocketAddr) -> Result<DuplexStream, Error> {
        let mut g = self.lock();
        let Some(tx) = g.listeners.get(&addr) else {
            return Err(Error::ConnectionRefused(addr));
        };
        let (client, server) = tokio::io::duplex(BUFFER_BYTES);
        if tx.send(server).is_err() {
            g.listeners.remove(&addr);
            return Err(Error::ConnectionRefused(addr));
        }
        Ok(client)
    }

    /// A publisher on `endpoint` (any text, such as `tcp://10.0.0.1:5557`): what it sends
    /// reaches every subscriber of the same endpoint text, as a ZMQ PUB socket does.
    #[must_use]
    pub fn publisher(&self, endpoint: impl Into<String>) -> Publisher {
        Publisher {
            net: self.clone(),
            endpoint: endpoint.into(),
        }
    }

    /// Subscribes to `endpoint`: the subscriber receives every message published there from
    /// now on, in order (nothing sent before; no publisher needed yet).
    #[must_use]
    pub fn subscribe(&self, endpoint: &str) -> Subscriber {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock()
            .topics
            .entry(endpoint.to_owned())
            .or_default()
            .push(tx);
        Subscriber { rx }
    }
}

impl MemNet {
    /// Answers requests sent to `endpoint` (any text, such as `tcp://10.0.0.1:5558`) until
    /// the returned responder is dropped: the in-memory form of a ZMQ ROUTER socket whose
    /// clients send one request and read every reply message.
    ///
    /// # Errors
    /// [`Error::EndpointInUse`] while another responder holds `endpoint`.
    pub fn respond(&self, endpoint: impl Into<String>) -> Result<Responder, Error> {
        let endpoint = endpoint.into();
        let mut g = self.lock();
        if g.responders
            .get(&endpoint)
            .is_some_and(|tx| !tx.is_closed())
        {
            return Err(Error::EndpointInUse(endpoint));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        g.responders.insert(endpoint.clone(), tx);
        Ok(Responder {
            endpoint,
            rx,
            net: self.clone(),
        })
    }

    /// Sends one request (its frames) to the responder at `endpoint` and returns its reply
    /// messages, in order, once it has answered.
    ///
    /// # Errors
    /// [`Error::NoResponder`] when nothing answers at `endpoint`, or the responder was
    /// dropped before answering.
    pub async fn request(
        &self,
        endpoint: &str,
        frames: Vec<Bytes>,
    ) -> Result<Vec<Vec<Bytes>>, Error> {
        let none = || Error::NoResponder(endpoint.to_owned());
        let (reply, rx) = oneshot::channel();
        {
            let g = self.lock();
            let tx = g.responders.get(endpoint).ok_or_else(none)?;
            tx.send(Request { frames, reply }).map_err(|_| none())?;
        }
        rx.await.map_err(|_| none())
    }
}

/// The answering side of a request/reply endpoint (see [`MemNet::respond`]); dropping it
/// frees the endpoint.
pub struct Responder {
    endpoint: String,
    rx: mpsc::UnboundedReceiver<Request>,
    net: MemNet,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// The endpoint text it answers at.
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next request, in the order they were sent. It waits for ever when none comes;
    /// select it against a cancellation.
    pub async fn recv(&mut self) -> Option<Request> {
        self.rx.recv().await
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.rx.close();
        let mut g = self.net.lock();
        if g.responders
            .get(&self.endpoint)
            .is_some_and(|tx| tx.is_closed())
        {
            g.responders.remove(&self.endpoint);
        }
    }
}

/// One request received by a [`Responder`].
#[derive(Debug)]
pub struct Request {
    frames: Vec<Bytes>,
    reply: oneshot::Sender<Vec<Vec<Bytes>>>,
}

impl Request {
    /// The request's frames.
    #[must_use]
    pub fn frames(&self) -> &[Bytes] {
        &self.frames
    }

    /// Answers with `messages` (each its frames), all delivered together; a requester that
    /// gave up receives nothing.
    pub fn reply(self, messages: Vec<Vec<Bytes>>) {
        let _ = self.reply.send(messages);
    }
}

/// A listener on a [`MemNet`]; dropping it frees the address.
pub struct MemListener {
    addr: SocketAddr,
    rx: mpsc::UnboundedReceiver<DuplexStream>,
    net: MemNet,
}

impl std::fmt::Debug for MemListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemListener")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MemListener {
    /// The address it listens at.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server half of the next connection, in the order they were opened. `None` only
    /// once the listener was unregistered.
    pub async fn accept(&mut self) -> Option<DuplexStream> {
        self.rx.recv().await
    }
}

impl Drop for MemListener {
    fn drop(&mut self) {
        self.rx.close();
        let mut g = self.net.lock();
        if g.listeners.get(&self.addr).is_some_and(|tx| tx.is_closed()) {
            g.listeners.remove(&self.addr);
        }
    }
}

/// The sending side of a topic (see [`MemNet::publisher`]).
#[derive(Clone)]
pub struct Publisher {
    net: MemNet,
    endpoint: String,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// The endpoint text it publishes on.
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends one message (its frames) to every current subscriber; returns how many it
    /// reached. Subscribers that were dropped are forgotten.
    pub fn send(&self, frames: &[Bytes]) -> usize {
        let mut g = self.net.lock();
        let Some(subs) = g.topics.get_mut(&self.endpoint) else {
            return 0;
        };
        subs.retain(|tx| tx.send(frames.to_vec()).is_ok());
        subs.len()
    }
}

/// The receiving side of a topic (see [`MemNet::subscribe`]).
#[derive(Debug)]
pub struct Subscriber {
    rx: mpsc::UnboundedReceiver<Vec<Bytes>>,
}

impl Subscriber {
    /// The next message's frames. It waits for ever when nothing is published, as a ZMQ
    /// SUB socket does; select it against a cancellation.
    pub async fn recv(&mut self) -> Option<Vec<Bytes>> {
        self.rx.recv().await
    }
}

#[cfg(test)]
mod tests;
