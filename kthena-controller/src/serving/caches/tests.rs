use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;

use super::ChildCaches;

fn caches() -> (ChildCaches, Writer<Pod>, Writer<Service>) {
    let (pods, pod_writer) = reflector::store();
    let (services, svc_writer) = reflector::store();
    (ChildCaches::new(pods, services), pod_writer, svc_writer)
}

/// Regression: with two reconciles waiting on `Store::wait_until_ready` directly, the
/// first was never woken (kube-runtime keeps one waker) and its ModelServing never got pods.
#[tokio::test(start_paused = true)]
async fn every_concurrent_waiter_is_woken_when_the_caches_are_ready() {
    let (caches, mut pods, mut svcs) = caches();
    let caches = std::sync::Arc::new(caches);
    let mut waiters = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let c = caches.clone();
        waiters.spawn(async move { c.ready().await });
    }
    // Let every waiter poll (and park) before the caches fill.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(waiters.try_join_next().is_none());
    pods.apply_watcher_event(&Event::InitDone);
    svcs.apply_watcher_event(&Event::InitDone);
    let woke = tokio::time::timeout(Duration::from_secs(1), waiters.join_all()).await;
    assert_eq!(woke, Ok(vec![true; 3]));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_writer_answers_not_ready() {
    let (caches, pods, mut svcs) = caches();
    svcs.apply_watcher_event(&Event::InitDone);
    drop(pods);
    let ready = tokio::time::timeout(Duration::from_secs(1), caches.ready()).await;
    assert_eq!(ready, Ok(false));
}
