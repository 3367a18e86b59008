//! The fairness queue's `user_id` label is bounded (real router + kthena-sim): 10,000
//! users make at most `FAIRNESS_METRICS_MAX_USERS` + 1 series, ids are hashed by default
//! (a 4 KB id never reaches the page), raw ids are cut to 64 bytes, and idle series go.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use crate::common::*;
use http::StatusCode;

const FAMILY: &str = "kthena_router_fairness_queue_dequeue_total{";

async fn start(env: &[(&str, &str)]) -> TestRouter {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let sim_addr = sim.addr();
    std::mem::forget(sim);
    let mut all = vec![
        ("ENABLE_FAIRNESS_SCHEDULING", "true"),
        ("FAIRNESS_MAX_QPS", "100000"),
    ];
    all.extend_from_slice(env);
    let r = TestRouter::start_with_env(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim_addr, "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
        &all,
    )
    .await;
    r.wait_ready().await;
    r
}

async fn as_user(url: &str, user: &str) {
    let body = serde_json::json!({"model": "m", "prompt": "hi", "max_tokens": 1, "user": user});
    let (s, _, b) = post(&format!("{url}/v1/completions"), body.to_string(), &[]).await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
}

async fn metrics(r: &TestRouter) -> String {
    get(&format!("http://{}/metrics", r.router.metrics_addr))
        .await
        .1
}

/// Regression: one series per `user` value, kept whole and for ever (10,000 users made
/// `/metrics` 825 KB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_users_make_a_bounded_page_without_their_ids() {
    let r = start(&[]).await;
    let url = r.url();
    let long = "x".repeat(4096);
    as_user(&url, &long).await;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..32 {
        let url = url.clone();
        tasks.spawn(async move {
            for i in (t..10_000).step_by(32) {
                as_user(&url, &format!("user-{i}")).await;
            }
        });
    }
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
    let page = metrics(&r).await;
    let series: Vec<&str> = page.lines().filter(|l| l.starts_with(FAMILY)).collect();
    // 1000 users of their own (the 4 KB one among them), the rest under `other`.
    assert_eq!(series.len(), 1001, "{:?}", &series[..3]);
    let other = format!("{FAMILY}model=\"m\",user_id=\"other\"}} ");
    let in_other: f64 = series
        .iter()
        .find_map(|l| l.strip_prefix(other.as_str()))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(in_other, 9001.0);
    assert!(!page.contains("user-1") && !page.contains("xxxx"));
    assert!(series.iter().all(|l| l.len() < 100), "{:?}", series[0]);
    assert!(page.len() < 200_000, "{} bytes", page.len());
    r.router.shutdown().await;
}

/// Raw ids when asked for, cut to 64 bytes; a series idle for the idle timeout is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_ids_are_cut_and_idle_series_disappear() {
    let r = start(&[
        ("FAIRNESS_METRICS_RAW_USER_ID", "true"),
        ("FAIRNESS_METRICS_USER_IDLE_TIMEOUT", "1s"),
    ])
    .await;
    let url = r.url();
    as_user(&url, &"y".repeat(4096)).await;
    as_user(&url, "bob").await;
    let page = metrics(&r).await;
    let cut = format!("{FAMILY}model=\"m\",user_id=\"{}\"}} 1", "y".repeat(64));
    assert!(page.lines().any(|l| l == cut), "{page}");
    assert!(page.contains("user_id=\"bob\""));
    let start = tokio::time::Instant::now();
    loop {
        let page = metrics(&r).await;
        if !page.lines().any(|l| l.starts_with(FAMILY)) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(start.elapsed() >= Duration::from_millis(800));
    // A user back after expiry starts a new series.
    as_user(&url, "bob").await;
    assert!(
        metrics(&r)
            .await
            .contains(&format!("{FAMILY}model=\"m\",user_id=\"bob\"}} 1"))
    );
    r.router.shutdown().await;
}
