//! The watch caches of a ModelServing's children (pods and services) and the one wait for
//! them to be filled that every reconcile shares.
//!
//! kube-runtime's `Store::wait_until_ready` keeps the waker of only the last task that
//! polled it (a `futures` oneshot receiver behind a mutex): when two reconciles wait at
//! once, the first is never woken and its worker stays parked for good. Here one task at a
//! time waits on the stores (a `tokio::sync::OnceCell` initialiser) and every other reconcile
//! waits on the cell, which wakes them all.

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::Store;
use tokio::sync::OnceCell;

/// The pod and service caches and whether both have listed everything once.
pub(super) struct ChildCaches {
    /// The pods carrying `modelserving.volcano.sh/group-name`.
    pub(super) pods: Store<Pod>,
    /// The services carrying `modelserving.volcano.sh/group-name`.
    pub(super) services: Store<Service>,
    /// Set (to `true`) once both stores are ready; `false` if a store's writer was dropped.
    ready: OnceCell<bool>,
}

impl ChildCaches {
    pub(super) fn new(pods: Store<Pod>, services: Store<Service>) -> Self {
        Self {
            pods,
            services,
            ready: OnceCell::new(),
        }
    }

    /// Waits until both caches have listed their objects once; `false` when a cache's
    /// watch stopped before that (the controller is shutting down). Any number of callers
    /// may wait at once: all of them return when the caches are ready.
    pub(super) async fn ready(&self) -> bool {
        *self
            .ready
            .get_or_init(|| async {
                self.pods.wait_until_ready().await.is_ok()
                    && self.services.wait_until_ready().await.is_ok()
            })
            .await
    }
}

#[cfg(test)]
mod tests;
