//! The connection budget all listeners share, from the open-files limit.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors kept out of the connection budget: the process's own files, the listening
/// sockets, the Redis and Kubernetes clients, the access log.
const RESERVED_FDS: usize = 64;

/// The client connections all listeners may hold together, derived from the open-files
/// limit (`RLIMIT_NOFILE`), so that no listener can take the descriptors another one
/// needs: a quarter of the descriptors (after [`RESERVED_FDS`]) stays for engine
/// connections, files and clients; of the rest, the inference listeners (the router's
/// port and Gateway ports) may use all, the other listeners (metrics, debug) together at
/// most a tenth, so the inference port always keeps nine tenths.
#[derive(Debug, Clone)]
pub(crate) struct ConnBudget {
    all: Arc<Semaphore>,
    pub(super) others: Arc<Semaphore>,
    pub(super) size: usize,
}

impl ConnBudget {
    /// The budget of this process's soft open-files limit (1,024 when it cannot be read).
    pub(crate) fn from_open_files_limit() -> Self {
        let soft = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft);
        Self::for_limit(usize::try_from(soft).unwrap_or(usize::MAX))
    }

    /// The budget of an open-files limit of `nofile`: `(nofile - 64) / 4 * 3` connections
    /// (at least 2), a tenth of them (at least 1) for the non-inference listeners.
    pub(crate) fn for_limit(nofile: usize) -> Self {
        let size = (nofile.saturating_sub(RESERVED_FDS) / 4 * 3).clamp(2, Semaphore::MAX_PERMITS);
        Self {
            all: Arc::new(Semaphore::new(size)),
            others: Arc::new(Semaphore::new((size / 10).max(1))),
            size,
        }
    }

    /// A slot for a new connection of an inference listener (`inference`) or another one,
    /// at once when free.
    pub(super) fn try_take(&self, inference: bool) -> Option<Vec<OwnedSemaphorePermit>> {
        let mut held = Vec::with_capacity(2);
        if !inference {
            held.push(Arc::clone(&self.others).try_acquire_owned().ok()?);
        }
        held.push(Arc::clone(&self.all).try_acquire_owned().ok()?);
        Some(held)
    }

    /// A slot, waiting until one is free.
    pub(super) async fn take(&self, inference: bool) -> Option<Vec<OwnedSemaphorePermit>> {
        let mut held = Vec::with_capacity(2);
        if !inference {
            held.push(Arc::clone(&self.others).acquire_owned().await.ok()?);
        }
        held.push(Arc::clone(&self.all).acquire_owned().await.ok()?);
        Some(held)
    }
}
