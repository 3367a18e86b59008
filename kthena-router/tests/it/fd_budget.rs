//! One connection budget for all listeners, from the open-files limit: a `kthena-router`
//! process started with a low `RLIMIT_NOFILE` and flooded with idle connections to its
//! metrics port still serves inference requests (the metrics listener may use a tenth of
//! the budget; the rest waits in the kernel's accept queue, holding no descriptor of the
//! router).
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test fail the test on any error"
)]

use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use tokio::net::TcpStream;

const NOFILE: usize = 256;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_metrics_connections_do_not_starve_the_inference_port() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mdir = dir.path().join("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(
        mdir.join("s.yaml"),
        model_server("srv", "real-model", "demo", ""),
    )
    .unwrap();
    std::fs::write(mdir.join("r.yaml"), simple_route("route", "public", "srv")).unwrap();
    let sim_addr = sim.addr();
    let router = spawn_router_process(dir.path(), &["prlimit".into(), format!("--nofile={NOFILE}:{NOFILE}")], |port, metrics, debug| {
        format!(
            "bindAddress: 127.0.0.1\nport: {port}\nmetricsPort: {metrics}\ndebugPort: {debug}\nmetricsScrapeInterval: 100ms\nlistener: {{headerReadTimeout: 60s}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{}",
            endpoint("sim-a", sim_addr, "demo")
        )
    })
    .await;
    let (port, metrics) = (router.port, router.metrics);
    let base = format!("http://127.0.0.1:{port}");

    // More idle connections to the metrics port than the process has descriptors.
    let mut idle = Vec::new();
    for _ in 0..NOFILE + 50 {
        idle.push(TcpStream::connect(("127.0.0.1", metrics)).await.unwrap());
    }
    // Give the metrics listener time to accept all it may.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = tokio::time::Instant::now();
    let url = format!("{base}/v1/chat/completions");
    let mut chats = tokio::task::JoinSet::new();
    for i in 0..20 {
        let url = url.clone();
        chats.spawn(async move {
            let body = chat("public", &format!("hello {i}"), false, 3);
            tokio::time::timeout(Duration::from_secs(10), post(&url, body, &[]))
                .await
                .expect("an inference request was not served within 10s")
        });
    }
    while let Some(done) = chats.join_next().await {
        let (status, _, body) = done.unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    eprintln!(
        "20 inference requests served in {:?} beside {} idle metrics connections",
        started.elapsed(),
        idle.len()
    );
    // Metrics are still scraped once the idle connections go.
    drop(idle);
    let (status, text) = get(&format!("http://127.0.0.1:{metrics}/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains(
            r#"kthena_router_downstream_connection_limit_reached_total{listener="metrics"}"#
        ),
        "{text}"
    );
}
