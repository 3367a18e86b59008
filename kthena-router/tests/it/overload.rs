//! Overload protection over real sockets: the in-flight cap sheds streaming requests with
//! 503 + `Retry-After` at once while the accepted streams finish, and an endpoint that drops
//! every connection is skipped once its circuit breaker opens.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

const CAP: usize = 200;
const CLIENTS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_streams_get_503_at_once_and_accepted_streams_finish() {
    // Real-time engine: 200 tokens at ~16 ms per decode step, a few seconds per stream.
    let sim = kthena_sim::spawn(
        kthena_sim::Config::default()
            .with_ephemeral_port()
            .with_model("real-model"),
    )
    .await
    .unwrap();
    let r = TestRouter::start(
        &format!("overload: {{maxInFlight: {CAP}}}"),
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    let body = chat("public", "tell me a long story", true, 200);
    let finished = Arc::new(AtomicUsize::new(0));
    let tasks = TaskTracker::new();
    let mut handles = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let (url, body, finished) = (url.clone(), body.clone(), Arc::clone(&finished));
        handles.push(tasks.spawn(async move {
            let resp = post_stream(&url, body, &[]).await;
            let status = resp.status();
            let retry_after = resp.headers().get("retry-after").cloned();
            // How many accepted streams had finished when this answer arrived.
            let finished_before = finished.load(Ordering::SeqCst);
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            if status == StatusCode::OK {
                finished.fetch_add(1, Ordering::SeqCst);
            }
            (status, retry_after, finished_before, bytes)
        }));
    }
    tasks.close();
    let (mut ok, mut shed, mut first_shed_after) = (0usize, 0usize, usize::MAX);
    for h in handles {
        let (status, retry_after, finished_before, bytes) = h.await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        match status {
            StatusCode::OK => {
                ok += 1;
                assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                shed += 1;
                first_shed_after = first_shed_after.min(finished_before);
                assert_eq!(retry_after.unwrap(), "1");
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["error"]["code"], "server_overloaded");
                assert_eq!(v["error"]["type"], "service_unavailable_error");
                assert_eq!(
                    v["error"]["message"],
                    format!(
                        "the router is overloaded: the router has {CAP} requests in flight; retry after 1s"
                    )
                );
            }
            s => panic!("unexpected status {s}: {text}"),
        }
    }
    eprintln!("accepted {ok}, shed {shed} of {CLIENTS} against a cap of {CAP}");
    assert_eq!(ok + shed, CLIENTS);
    assert!(ok >= CAP, "at least the cap is served: {ok}");
    assert!(shed > 0);
    // Shed at once: a 503 arrived while no accepted stream had finished yet.
    assert_eq!(first_shed_after, 0);
    assert_eq!(
        r.metric("kthena_router_overload_rejected_total{reason=\"router_limit\"}")
            .await,
        shed as f64
    );
    // Everything is given back.
    assert_eq!(r.metric("kthena_router_active_requests").await, 0.0);
    let counters = r.prefill_counters().await;
    assert_eq!(counters["sim-a"], (0, 0));
    let (_, pods) = get(&format!(
        "http://{}/debug/config_dump/pods",
        r.router.debug_addr
    ))
    .await;
    let v: serde_json::Value = serde_json::from_str(&pods).unwrap();
    assert_eq!(v["pods"][0]["metrics"]["inFlight"], 0, "{pods}");
    let log = r.access_log();
    assert_eq!(log.len(), CLIENTS);
    let shed_lines = log
        .iter()
        .filter(|l| l["status_code"] == 503 && l["error"]["type"] == "overload")
        .count();
    assert_eq!(shed_lines, shed);
}

/// Accepts connections and drops each one once it has read a request; counts the
/// inference requests (`POST`), not the metric scrapes.
async fn dropping_engine(
    tasks: &TaskTracker,
) -> anyhow::Result<(std::net::SocketAddr, Arc<AtomicUsize>)> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let posts = Arc::new(AtomicUsize::new(0));
    let p2 = Arc::clone(&posts);
    let t2 = tasks.clone();
    tasks.spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let p = Arc::clone(&p2);
            t2.spawn(async move {
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).await.is_ok() && &buf == b"POST" {
                    p.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    Ok((addr, posts))
}

#[tokio::test]
async fn a_failing_endpoint_is_skipped_once_its_breaker_opens() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let tasks = TaskTracker::new();
    let (dead, posts) = dropping_engine(&tasks).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h\noverload: {breakerFailures: 3, breakerCoolDown: 1h}",
        &format!(
            "{}{}",
            endpoint("live", sim.addr(), "demo"),
            endpoint("dead", dead, "demo")
        ),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    for i in 0..20 {
        let (status, _, body) = post(&url, chat("public", "hi", false, 4), &[]).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {body:?}");
    }
    assert_eq!(
        posts.load(Ordering::SeqCst),
        3,
        "3 failures open the breaker"
    );
    let series = "{namespace=\"default\",endpoint=\"dead\"}";
    assert_eq!(
        r.metric(&format!("kthena_router_circuit_breaker_state{series}"))
            .await,
        1.0
    );
    assert_eq!(
        r.metric(&format!(
            "kthena_router_circuit_breaker_opened_total{series}"
        ))
        .await,
        1.0
    );
    let log = r.access_log();
    let retried = log
        .iter()
        .filter(|l| l["upstream_attempts"].as_u64() == Some(2))
        .count();
    assert_eq!(retried, 3, "each failed attempt cost one retry");
    let last = log.last().unwrap();
    assert_eq!(last["selected_pod"], "live");
    assert_eq!(last["upstream_attempts"], 1);
    // The dead endpoint is removed from the config: its breaker series go with it (an
    // alert on an open breaker must not fire for good), the live one's stay.
    let cfg = r.dir.path().join("router.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let before = r.router.generation();
    std::fs::write(&cfg, text.replace(&endpoint("dead", dead, "demo"), "")).unwrap();
    for _ in 0..250 {
        if r.router.generation() > before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        r.router.generation() > before,
        "the config was not reloaded"
    );
    let (_, text) = get(&format!("http://{}/metrics", r.router.metrics_addr)).await;
    assert!(!text.contains("endpoint=\"dead\""), "{text}");
}
