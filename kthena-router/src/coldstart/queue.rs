//! The FIFO of held requests per ModelServer.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::oneshot;

/// One held request: woken through `tx`.
#[derive(Debug)]
struct Waiter {
    id: u64,
    tx: oneshot::Sender<()>,
}

/// The held requests of every ModelServer, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    servers: HashMap<Arc<str>, VecDeque<Waiter>>,
    next_id: u64,
}

impl Waiters {
    /// Holds one more request for `server` unless `limit` are held: its id and the
    /// receiver its release is sent on; `None` when full.
    pub(crate) fn push(
        &mut self,
        server: &Arc<str>,
        limit: usize,
    ) -> Option<(u64, oneshot::Receiver<()>)> {
        let q = self.servers.entry(Arc::clone(server)).or_default();
        if q.len() >= limit {
            if q.is_empty() {
                self.servers.remove(server);
            }
            return None;
        }
        self.next_id += 1;
        let (tx, rx) = oneshot::channel();
        q.push_back(Waiter {
            id: self.next_id,
            tx,
        });
        Some((self.next_id, rx))
    }

    /// Removes the request `id` held for `server` (it left: timeout or client gone);
    /// whether it was still there.
    pub(crate) fn remove(&mut self, server: &str, id: u64) -> bool {
        let Some(q) = self.servers.get_mut(server) else {
            return false;
        };
        let before = q.len();
        q.retain(|w| w.id != id);
        let removed = q.len() != before;
        if q.is_empty() {
            self.servers.remove(server);
        }
        removed
    }

    /// Releases, in arrival order, every request held for a ModelServer `release` says to
    /// wake; the number released.
    pub(crate) fn release(&mut self, mut release: impl FnMut(&str) -> bool) -> usize {
        let keys: Vec<Arc<str>> = self
            .servers
            .keys()
            .filter(|k| release(k))
            .cloned()
            .collect();
        let mut n = 0;
        for k in keys {
            for w in self.servers.remove(&k).into_iter().flatten() {
                // A receiver gone is a request that already left.
                n += usize::from(w.tx.send(()).is_ok());
            }
        }
        n
    }

    /// Requests held for `server`.
    #[cfg(test)]
    pub(crate) fn len(&self, server: &str) -> usize {
        self.servers.get(server).map_or(0, VecDeque::len)
    }
}
