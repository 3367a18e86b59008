//! vLLM's KV-event replay (`vllm-project/vllm` `vllm/distributed/kv_events.py`,
//! `ZmqEventPublisher`): the publisher keeps the last `buffer_steps` batches it published and
//! answers, on a ROUTER socket bound at its `replay_endpoint`, a request
//! `[identity, "", start_seq]` (8 bytes big-endian) with one message
//! `[identity, "", seq, payload]` per buffered batch whose `seq >= start_seq`, oldest first,
//! then `[identity, "", END_SEQ, ""]` (`END_SEQ` is -1 as 8 bytes). A request of another
//! shape is ignored (vLLM logs it).

use std::collections::VecDeque;

use bytes::Bytes;
use kthena_kvevents::END_SEQ;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::{Error, Result};

/// The last `cap` published batches, oldest first (vLLM's `_buffer` deque of
/// `buffer_steps`).
#[derive(Debug)]
pub(crate) struct ReplayBuffer {
    batches: VecDeque<(u64, Bytes)>,
    cap: usize,
}

impl ReplayBuffer {
    /// An empty buffer of `cap` batches (at least 1).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            batches: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Keeps batch `seq`, dropping the oldest when full.
    pub(crate) fn push(&mut self, seq: u64, payload: Bytes) {
        if self.batches.len() == self.cap {
            self.batches.pop_front();
        }
        self.batches.push_back((seq, payload));
    }

    /// The reply messages (without the identity and empty frames) to a request for
    /// `start` on: `[seq, payload]` per buffered batch with `seq >= start`, then
    /// `[END_SEQ, ""]`.
    pub(crate) fn answer(&self, start: u64) -> Vec<[Bytes; 2]> {
        self.batches
            .iter()
            .filter(|(seq, _)| *seq >= start)
            .map(|(seq, p)| [Bytes::copy_from_slice(&seq.to_be_bytes()), p.clone()])
            .chain(std::iter::once([
                Bytes::from_static(&END_SEQ),
                Bytes::new(),
            ]))
            .collect()
    }
}

/// The start sequence number of a request's frames after the identity, `["", start]`.
fn start_seq(frames: &[Bytes]) -> Option<u64> {
    match frames {
        [empty, start] if empty.is_empty() => Some(u64::from_be_bytes(start[..].try_into().ok()?)),
        _ => None,
    }
}

/// One request received on a [`ReplaySocket`].
pub(crate) enum ReplayRequest {
    /// From a ZMQ DEALER or REQ: the peer's identity frame.
    Zmq { identity: Bytes, start: u64 },
    /// From the in-memory network.
    Memory {
        request: kthena_memnet::Request,
        start: u64,
    },
}

/// The socket replay requests arrive on.
pub(crate) enum ReplaySocket {
    /// A bound ZMQ ROUTER socket.
    Zmq(zeromq::RouterSocket),
    /// A request/reply endpoint of an in-memory network.
    Memory(kthena_memnet::Responder),
}

impl std::fmt::Debug for ReplaySocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Zmq(_) => f.write_str("ReplaySocket::Zmq"),
            Self::Memory(r) => write!(f, "ReplaySocket::Memory({})", r.endpoint()),
        }
    }
}

impl ReplaySocket {
    /// Binds a ROUTER socket at `endpoint` (`tcp://host:port`, port 0 picks a free one);
    /// returns it and the bound port.
    ///
    /// # Errors
    /// [`Error::KvEvents`] when the socket cannot be bound.
    pub(crate) async fn bind(endpoint: &str, port: u16) -> Result<(Self, u16)> {
        let mut socket = zeromq::RouterSocket::new();
        let bound = socket
            .bind(endpoint)
            .await
            .map_err(|source| Error::KvEvents {
                endpoint: endpoint.to_owned(),
                source,
            })?;
        let port = match bound {
            zeromq::Endpoint::Tcp(_, p) => p,
            _ => port,
        };
        Ok((Self::Zmq(socket), port))
    }

    /// The next well-formed request; `None` when the socket is closed. Malformed requests
    /// are skipped (logged).
    pub(crate) async fn recv(&mut self) -> Option<ReplayRequest> {
        loop {
            match self {
                Self::Zmq(socket) => {
                    let msg = match socket.recv().await {
                        Ok(m) => m.into_vec(),
                        Err(e) => {
                            tracing::warn!(error = %e, "KV-event replay socket failed.");
                            return None;
                        }
                    };
                    let start = msg.get(1..).and_then(start_seq);
                    match (msg.first(), start) {
                        (Some(identity), Some(start)) => {
                            let identity = identity.clone();
                            return Some(ReplayRequest::Zmq { identity, start });
                        }
                        _ => tracing::warn!(frames = msg.len(), "Invalid KV-event replay request."),
                    }
                }
                Self::Memory(responder) => {
                    let request = responder.recv().await?;
                    match start_seq(request.frames()) {
                        Some(start) => return Some(ReplayRequest::Memory { request, start }),
                        None => tracing::warn!("Invalid KV-event replay request."),
                    }
                }
            }
        }
    }

    /// Answers `request` from `buffer`.
    pub(crate) async fn answer(&mut self, request: ReplayRequest, buffer: &ReplayBuffer) {
        match (self, request) {
            (Self::Zmq(socket), ReplayRequest::Zmq { identity, start }) => {
                for [seq, payload] in buffer.answer(start) {
                    let mut msg = ZmqMessage::from(identity.clone());
                    msg.push_back(Bytes::new());
                    msg.push_back(seq);
                    msg.push_back(payload);
                    if let Err(e) = socket.send(msg).await {
                        tracing::warn!(error = %e, "KV-event replay answer failed.");
                        return;
                    }
                }
            }
            (_, ReplayRequest::Memory { request, start }) => {
                let messages = buffer
                    .answer(start)
                    .into_iter()
                    .map(|[seq, payload]| vec![Bytes::new(), seq, payload])
                    .collect();
                request.reply(messages);
            }
            (Self::Memory(_), ReplayRequest::Zmq { .. }) => {}
        }
    }
}
