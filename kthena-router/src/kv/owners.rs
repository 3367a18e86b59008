//! What the router knows about the owners of Redis fields: each endpoint's container start
//! (from every routing snapshot) and, in cluster mode, every pod of the cluster with its
//! container start (from the Pod store, after it synced). The Redis index
//! ([`RedisKvIndex`](crate::kv::RedisKvIndex)) reads the starts to ignore owners written
//! before a restart; the Redis garbage collection (`kv::redis_gc`) reads both.
//!
//! One [`OwnerView`] lives for the router's lifetime (created by the
//! [`KvLoader`](crate::kv::KvLoader), handed to every Redis index it builds and to the
//! snapshots' [`KvState`](crate::kv::KvState)).
//!
//! A pod's container start is Go Kthena's `podLastContainerStartUnix`
//! (`pkg/kthena-router/scheduler/plugins/kvcache_aware.go` on Go Kthena's main branch,
//! pull request #1463, after v1.0.0): the newest `state.running.startedAt` among the pod's
//! container statuses, in Unix seconds; none while no container runs.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use k8s_openapi::api::core::v1::Pod;

use crate::upstream::endpoint::Endpoint;

/// The Redis owner field of Go Kthena's KV layout for pod `name` of `namespace`:
/// `name.namespace` (`python/kthena/runtime/kv_cache_manager.py`).
#[must_use]
pub fn block_owner(namespace: &str, name: &str) -> String {
    format!("{name}.{namespace}")
}

/// The field of Go Kthena's in-flight hash for pod `name` of `namespace`: `namespace/name`
/// (`pkg/kthena-router/datastore/on_flight_counter.go`).
#[must_use]
pub fn in_flight_owner(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Unix seconds of the newest running container's start of `pod`; `None` while none runs.
#[must_use]
pub fn pod_container_started(pod: &Pod) -> Option<i64> {
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|cs| cs.state.as_ref()?.running.as_ref()?.started_at.as_ref())
        .map(|t| t.0.as_second())
        .max()
}

/// The cluster's pods as the router's Pod store listed them.
#[derive(Debug, Default)]
pub struct PodList {
    /// Container start by block owner field (`name.namespace`); `None`: nothing runs.
    pub by_block_owner: HashMap<String, Option<i64>>,
    /// Every in-flight field (`namespace/name`) of a pod that exists.
    pub by_in_flight_owner: HashSet<String>,
}

/// Container starts of endpoints and, in cluster mode, the pod list (see the module docs).
#[derive(Debug, Default)]
pub struct OwnerView {
    /// Container start by block owner field, from the last routing snapshot.
    endpoints: RwLock<HashMap<String, i64>>,
    /// Cluster mode: the last pod list (`None` until the Pod store synced, and always in
    /// standalone mode).
    pods: RwLock<Option<Arc<PodList>>>,
}

impl OwnerView {
    /// A view that knows nothing yet.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Replaces the endpoints' container starts with those of `endpoints` (the ones that
    /// have one).
    pub fn note_endpoints(&self, endpoints: &[Arc<Endpoint>]) {
        let map: HashMap<String, i64> = endpoints
            .iter()
            .filter_map(|e| Some((block_owner(&e.namespace, &e.name), e.container_started?)))
            .collect();
        *self
            .endpoints
            .write()
            .unwrap_or_else(PoisonError::into_inner) = map;
    }

    /// Replaces the pod list with `pods` (every pod of the synced Pod store).
    pub fn note_pods(&self, pods: &[Arc<Pod>]) {
        let mut list = PodList::default();
        for p in pods {
            let Some(name) = p.metadata.name.as_deref() else {
                continue;
            };
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            list.by_block_owner
                .insert(block_owner(ns, name), pod_container_started(p));
            list.by_in_flight_owner.insert(in_flight_owner(ns, name));
        }
        *self.pods.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(list));
    }

    /// The container start of block owner `owner` (`name.namespace`): the endpoint's, else
    /// the listed pod's; `None` when unknown or nothing runs.
    #[must_use]
    pub fn started(&self, owner: &str) -> Option<i64> {
        let from_endpoint = self
            .endpoints
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(owner)
            .copied();
        from_endpoint.or_else(|| self.pod_list()?.by_block_owner.get(owner).copied()?)
    }

    /// The starts as they are now, for many lookups in a row (holds a read lock on the
    /// endpoints' starts until dropped: use it between Redis calls, not across them).
    #[must_use]
    pub fn starts(&self) -> Starts<'_> {
        Starts {
            endpoints: self
                .endpoints
                .read()
                .unwrap_or_else(PoisonError::into_inner),
            pods: self.pod_list(),
        }
    }

    /// The last pod list (`None` before the Pod store synced and in standalone mode).
    #[must_use]
    pub fn pod_list(&self) -> Option<Arc<PodList>> {
        self.pods
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The container starts at one moment, see [`OwnerView::starts`].
#[derive(Debug)]
pub struct Starts<'a> {
    endpoints: RwLockReadGuard<'a, HashMap<String, i64>>,
    pods: Option<Arc<PodList>>,
}

impl Starts<'_> {
    /// As [`OwnerView::started`].
    #[must_use]
    pub fn get(&self, owner: &str) -> Option<i64> {
        self.endpoints
            .get(owner)
            .copied()
            .or_else(|| self.pods.as_ref()?.by_block_owner.get(owner).copied()?)
    }
}

#[cfg(test)]
mod tests;
