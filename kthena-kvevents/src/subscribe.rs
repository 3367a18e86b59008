//! The subscription to one engine's KV-event publisher (feature `subscribe`): a ZMQ SUB
//! socket on every topic, connected with backoff and rebuilt whenever the publisher goes
//! away, each message handed to a [`Subscriber`].
//!
//! What a message does (sequence bookkeeping with [`SeqTracker`](crate::SeqTracker), replay
//! of gaps, applying the batch to an index, counting) is the subscriber's: the router replays
//! gaps and keeps metrics, a small gateway only applies the events.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use zeromq::{Socket, SocketEvent, SocketRecv, SubSocket};

/// The first wait after a failed connection attempt; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest wait between two connection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What a [`subscribe`] loop reports to its owner.
pub trait Subscriber: Send {
    /// Handles one message: its frames, `[topic, seq, payload]` when the publisher is well
    /// behaved (see [`split_frames`](crate::split_frames)). The next message is read once the
    /// returned future is done.
    fn message(&mut self, frames: &[Bytes]) -> impl Future<Output = ()> + Send;

    /// The socket is connected and subscribed (`true`), or the publisher went away (`false`;
    /// the next connection follows at once). A subscriber that tracks sequence numbers calls
    /// [`SeqTracker::reconnected`](crate::SeqTracker::reconnected) on `false`. Not called when
    /// the loop ends by cancellation.
    fn connected(&mut self, on: bool) {
        let _ = on;
    }
}

/// Subscribes to the KV events published at `address` (`tcp://host:port`) until `cancel`
/// fires: connects (retrying from [`FIRST_BACKOFF`] doubling to [`MAX_BACKOFF`] while the
/// engine is not listening), subscribes to every topic and hands each message to
/// `subscriber`. When the publisher goes away (the connection drops or a receive fails) the
/// socket is rebuilt the same way. `endpoint` names the engine in the log.
pub async fn subscribe(
    endpoint: &str,
    address: &str,
    subscriber: &mut impl Subscriber,
    cancel: &CancellationToken,
) {
    loop {
        let Some(mut sock) = connect(endpoint, address, cancel).await else {
            return;
        };
        let mut monitor = sock.monitor();
        tracing::info!(endpoint = %endpoint, address = %address, "Subscribed to KV events");
        subscriber.connected(true);
        loop {
            let msg = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                ev = monitor.next() => match ev {
                    Some(SocketEvent::Disconnected(_)) | None => break,
                    Some(_) => continue,
                },
                m = sock.recv() => m,
            };
            match msg {
                Ok(m) => {
                    let frames = m.into_vec();
                    if cancel.is_cancelled() {
                        return;
                    }
                    subscriber.message(&frames).await;
                }
                Err(e) => {
                    tracing::debug!(endpoint = %endpoint, error = %e, "KV-event receive failed; reconnecting");
                    break;
                }
            }
        }
        subscriber.connected(false);
        tracing::info!(endpoint = %endpoint, "KV-event publisher disconnected; reconnecting");
    }
}

/// Connects a SUB socket to `address` and subscribes to every topic, retrying with backoff;
/// `None` when cancelled. The first failure once the backoff has reached [`MAX_BACKOFF`] is
/// logged as a warning (earlier ones at debug: an engine that is starting up).
async fn connect(endpoint: &str, address: &str, cancel: &CancellationToken) -> Option<SubSocket> {
    let mut backoff = FIRST_BACKOFF;
    let mut warned = false;
    loop {
        let mut s = SubSocket::new();
        let attempt = async {
            s.connect(address).await?;
            s.subscribe("").await
        };
        tokio::select! {
            () = cancel.cancelled() => return None,
            r = attempt => match r {
                Ok(()) => return Some(s),
                Err(e) if backoff == MAX_BACKOFF && !warned => {
                    warned = true;
                    tracing::warn!(endpoint = %endpoint, address = %address, error = %e, "KV-event publisher unreachable; retrying every 2 s");
                }
                Err(e) => tracing::debug!(endpoint = %endpoint, address = %address, error = %e, "KV-event connect failed; retrying"),
            },
        }
        tokio::select! {
            () = cancel.cancelled() => return None,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
