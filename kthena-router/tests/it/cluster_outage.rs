//! Cluster mode after a minute without the API server. The test runs alone in a process of
//! its own (`common::in_own_process`), with a control plane of its own, so stopping
//! kube-apiserver that long disturbs no other test.

use std::time::Duration;

use crate::cluster_support::{TwoPods, apply, model_route, two_pods};
use crate::common::in_own_process;
use tokio::time::Instant;

/// How long the API server stays away: 60 s (`OUTAGE_SECS` overrides it, to measure other
/// outages).
fn outage() -> Duration {
    let secs = std::env::var("OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

/// Regression: after an outage every watch resumes with `410 Expired`, and the reflectors
/// treated it as one more error of kube-rs' default back-off (growing to 30 s, jitter
/// doubling it), so after a 60 s outage the router saw changes 76 s later: a deleted pod
/// kept its traffic, a new route answered 404. Now both are seen within 5 s of the API
/// server's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_after_a_minute_long_api_server_outage_are_seen_within_5s() {
    // The control plane of the process is stopped: no other test may use it.
    if !in_own_process(
        module_path!(),
        "changes_after_a_minute_long_api_server_outage_are_seen_within_5s",
    ) {
        return;
    }
    let env = kthena_testenv::TestEnv::get().await.unwrap();
    let ns = env.namespace("cluster-outage").await.unwrap();
    let TwoPods {
        n,
        model,
        node,
        router: r,
    } = two_pods(&ns).await;

    env.stop_apiserver().await.expect(
        "stop the API server (a control plane of this process's own, not KTHENA_TEST_KUBECONFIG)",
    );
    tokio::time::sleep(outage()).await;
    // Still serving the last snapshot.
    assert_eq!(r.send(&model, 4).await.len(), 4);
    env.start_apiserver().await.unwrap();
    let back = Instant::now();

    // A pod leaves and a route appears right after the return.
    node.delete("pod-b").await;
    let other = format!("{n}-other");
    apply(&ns, &[], &[model_route(&n, "other", &other, "ms")]).await;
    let limit = Duration::from_secs(5);
    r.wait_endpoints(&n, "ms", &["pod-a"], limit).await;
    let pod_seen = back.elapsed();
    r.wait_route(&other, &n, "ms", limit).await;
    let route_seen = back.elapsed();
    eprintln!(
        "outage {:?}: deleted pod seen {pod_seen:?}, new route seen {route_seen:?} after the API server returned",
        outage()
    );
    assert!(pod_seen <= limit, "{pod_seen:?}");
    assert!(route_seen <= limit, "{route_seen:?}");
    assert_eq!(r.send(&model, 6).await, vec!["pod-a"; 6]);
    assert_eq!(r.send(&other, 2).await.len(), 2);
    r.router.shutdown().await;
}
