//! Cluster mode while the API server goes away. The test runs alone in a process of its own
//! (`common::in_own_process`), with a control plane of its own, so stopping its
//! kube-apiserver disturbs no other test.

use std::time::Duration;

use crate::cluster_support::{TwoPods, two_pods};
use crate::common::in_own_process;

/// Stopping kube-apiserver loses no request (the router serves its last snapshot); after
/// the restart the reflectors re-list at once (`410 Expired`) and a change made then is
/// followed within 5 s of the API server's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_restart_loses_no_request_and_resumes_watching() {
    // The control plane of the process is stopped: no other test may use it.
    if !in_own_process(
        module_path!(),
        "api_server_restart_loses_no_request_and_resumes_watching",
    ) {
        return;
    }
    let env = kthena_testenv::TestEnv::get().await.unwrap();
    let ns = env.namespace("cluster-restart").await.unwrap();
    let TwoPods {
        n,
        model,
        node,
        router: r,
    } = two_pods(&ns).await;

    env.stop_apiserver().await.expect(
        "stop the API server (a control plane of this process's own, not KTHENA_TEST_KUBECONFIG)",
    );
    // The API server is gone: every request is still answered from the last snapshot.
    let served = r.send(&model, 20).await;
    assert_eq!(served.len(), 20);
    assert!(
        served.iter().all(|p| p == "pod-a" || p == "pod-b"),
        "{served:?}"
    );
    assert_eq!(r.endpoints_of(&n, "ms"), ["pod-a", "pod-b"]);

    env.start_apiserver().await.unwrap();
    let back = tokio::time::Instant::now();
    assert_eq!(r.send(&model, 10).await.len(), 10);

    // A change after the restart is seen within seconds: every watch resumes with
    // `410 Expired` and re-lists at once (kube-rs' default back-off made it one more
    // pause of up to a minute).
    node.delete("pod-b").await;
    r.wait_endpoints(&n, "ms", &["pod-a"], Duration::from_secs(5))
        .await;
    let took = back.elapsed();
    eprintln!("change after the restart seen {took:?} after the API server returned");
    assert!(took <= Duration::from_secs(5), "{took:?}");
    assert_eq!(r.send(&model, 10).await, vec!["pod-a"; 10]);
    r.router.shutdown().await;
}
