//! The supervisor of the KV-event subscriptions: one per endpoint of the current snapshot
//! that has a `kvEvents` address, while the KV index is fed by events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kthena_sched::{EndpointId, KvIndex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::kv::events::KvSource;
use crate::shared::Shared;
use crate::upstream::endpoint::Endpoint;

/// How often the supervisor compares the snapshot's endpoints with its subscriptions.
pub(crate) const SUPERVISE_INTERVAL: Duration = Duration::from_millis(200);

struct Running {
    /// The endpoint the subscription was started for: a rebuilt endpoint (new address, new
    /// KV-event addresses, a restarted pod) is another one.
    endpoint: Arc<Endpoint>,
    index: Arc<dyn KvIndex>,
    cancel: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

/// Keeps one KV-event subscription per endpoint of the current snapshot that has a
/// KV-event address (standalone: `kvEvents`; cluster mode: read from the pod) while the index
/// is fed by events, until `cancel` fires.
///
/// Every [`SUPERVISE_INTERVAL`] it starts subscriptions for new endpoints and stops those of
/// endpoints that left or were rebuilt (a new address or KV-event address, a restarted pod, a
/// new index); a stopped subscription's endpoint is then removed from the index, so no entry of
/// a removed or restarted engine survives, even one applied after the scheduler's own removal
/// hook. It also refreshes the index-size gauge.
pub(crate) async fn supervise(shared: Arc<Shared>, cancel: CancellationToken, tasks: TaskTracker) {
    let mut running: BTreeMap<EndpointId, Running> = BTreeMap::new();
    let metrics = shared.metrics.kv.clone();
    let mut tick = tokio::time::interval(SUPERVISE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        let snap = shared.snapshot.load_full();
        let mut desired: BTreeMap<EndpointId, (Arc<Endpoint>, Arc<dyn KvIndex>)> = BTreeMap::new();
        if let Some(index) = snap.kv.index.as_ref().filter(|_| snap.kv.feeds_events) {
            for ep in snap.endpoints.iter().filter(|e| e.kv_events.is_some()) {
                desired.insert(ep.id.clone(), (Arc::clone(ep), Arc::clone(index)));
            }
        }
        let stale: Vec<EndpointId> = running
            .iter()
            .filter(|(id, r)| {
                desired.get(*id).is_none_or(|(ep, idx)| {
                    !Arc::ptr_eq(ep, &r.endpoint) || !Arc::ptr_eq(idx, &r.index)
                })
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some(r) = running.remove(&id) {
                r.cancel.cancel();
                let _ = r.done.await;
                r.index.remove_endpoint(&id);
                metrics.remove_endpoint(id.as_str());
                tracing::info!(endpoint = %id, "Stopped KV-event subscription and cleared its entries");
            }
        }
        for (id, (endpoint, index)) in desired {
            if running.contains_key(&id) {
                continue;
            }
            let Some(events) = endpoint.kv_events.clone() else {
                continue;
            };
            let source = KvSource {
                endpoint: id.clone(),
                events,
                replay: endpoint.kv_events_replay.clone(),
            };
            let token = cancel.child_token();
            let done = spawn_subscription(&shared, &source, &index, &token, &tasks);
            running.insert(
                id,
                Running {
                    endpoint,
                    index,
                    cancel: token,
                    done,
                },
            );
        }
        if let Some(index) = &snap.kv.index {
            metrics.set_index_entries(index.len());
        }
    }
    for (_, r) in running {
        r.cancel.cancel();
        let _ = r.done.await;
    }
}

/// Starts one endpoint's subscription on `tasks`: over ZMQ, or on the router's in-memory
/// network when it runs on one.
fn spawn_subscription(
    shared: &Shared,
    source: &KvSource,
    index: &Arc<dyn KvIndex>,
    token: &CancellationToken,
    tasks: &TaskTracker,
) -> tokio::task::JoinHandle<()> {
    let metrics = shared.metrics.kv.clone();
    match &shared.memory {
        Some(net) => tasks.spawn(crate::kv::events::subscribe_memory(
            source.clone(),
            Arc::clone(index),
            metrics,
            net.clone(),
            token.clone(),
        )),
        None => tasks.spawn(crate::kv::events::subscribe(
            source.clone(),
            Arc::clone(index),
            metrics,
            token.clone(),
        )),
    }
}
