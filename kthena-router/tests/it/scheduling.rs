//! Router integration tests of load-aware scheduling over real sockets: prefix-cache
//! affinity (also across a config reload), engine metrics scraping and its concurrency
//! bound, per-endpoint prefill counters with `least-prefill`, and provisional prefix
//! entries.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::time::Instant;

/// Prefix-cache routing sends ≥ 90% of repeated long-prefix requests to one engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_cache_affinity() {
    let sims = kthena_sim::spawn_many(3, sim_config("m").with_time_scale(1000.0))
        .await
        .unwrap();
    let eps: String = sims
        .iter()
        .enumerate()
        .map(|(i, s)| endpoint(&format!("sim-{i}"), s.addr(), "demo"))
        .collect();
    let head = "metricsScrapeInterval: 1h
scheduler:
  pluginConfig:
  - name: prefix-cache
    args: {blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5}
  plugins:
    Score:
      enabled:
      - {name: prefix-cache, weight: 1}
";
    let r = TestRouter::start(
        head,
        &eps,
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let prompt = "You are a helpful assistant. ".repeat(40);
    let url = format!("{}/v1/completions", r.url());
    for i in 0..230 {
        let body = serde_json::json!({"model": "m", "prompt": format!("{prompt} question {}", i % 7), "max_tokens": 1});
        let (s, _, _) = post(&url, body.to_string(), &[]).await;
        assert_eq!(s, StatusCode::OK);
    }
    let log = r.access_log();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for l in log.iter().skip(30) {
        *counts
            .entry(l["selected_pod"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let top = counts.values().copied().max().unwrap();
    assert!(top * 100 >= 200 * 90, "{counts:?}");
    assert!(
        r.metric(r#"kthena_router_prefix_cache_match_ratio_count{model="m"}"#)
            .await
            >= 230.0
    );
    r.router.shutdown().await;
}

/// A scheduler change reloaded in the middle of traffic keeps the prefix-cache store: the
/// requests after the reload still land on the engine holding their long prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_traffic_keeps_prefix_affinity() {
    let sims = kthena_sim::spawn_many(3, sim_config("m").with_time_scale(1000.0))
        .await
        .unwrap();
    let eps: String = sims
        .iter()
        .enumerate()
        .map(|(i, s)| endpoint(&format!("sim-{i}"), s.addr(), "demo"))
        .collect();
    let head = "metricsScrapeInterval: 1h
scheduler:
  plugins:
    Score:
      enabled:
      - {name: prefix-cache, weight: 1}
      - {name: least-request, weight: 1}
";
    let r = TestRouter::start(
        head,
        &eps,
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let url = format!("{}/v1/completions", r.url());
    // Three long prefixes (20 blocks of 64 bytes each), first sent one at a time: idle
    // engines tie, so they take turns and each prefix gets its own engine.
    let prefixes: Vec<String> = (0..3)
        .map(|k| format!("system prompt {k}: ").repeat(80))
        .collect();
    let body = |k: usize, i: usize| {
        serde_json::json!({"model": "m", "prompt": format!("{} q{i}", prefixes[k]), "max_tokens": 1})
            .to_string()
    };
    for k in 0..3 {
        let (s, _, _) = post(&url, body(k, 0), &[]).await;
        assert_eq!(s, StatusCode::OK);
    }
    let holders: Vec<String> = r.access_log()[..3]
        .iter()
        .map(|l| l["selected_pod"].as_str().unwrap().to_owned())
        .collect();

    // Traffic on the three prefixes while the scheduler section changes.
    let stop = Arc::new(AtomicBool::new(false));
    let mut traffic = tokio::task::JoinSet::new();
    traffic.spawn({
        let (stop, url) = (Arc::clone(&stop), url.clone());
        let bodies: Vec<Vec<String>> = (0..3)
            .map(|k| (0..200).map(|i| body(k, 1000 + i)).collect())
            .collect();
        async move {
            let mut sent = 0;
            while !stop.load(Ordering::Relaxed) || sent < 9 {
                let (s, _, _) = post(&url, bodies[sent % 3][sent / 3 % 200].clone(), &[]).await;
                assert_eq!(s, StatusCode::OK);
                sent += 1;
            }
            sent
        }
    });
    let before = r.router.snapshot();
    let path = r.dir.path().join("router.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let changed = text.replace(
        "{name: least-request, weight: 1}",
        "{name: least-request, weight: 2}",
    );
    assert_ne!(text, changed);
    std::fs::write(&path, changed).unwrap();
    for _ in 0..200 {
        if r.router.generation() > before.generation {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = r.router.snapshot();
    assert!(after.generation > before.generation, "the config reloaded");
    assert!(
        !Arc::ptr_eq(&before.scheduler, &after.scheduler),
        "a new scheduler"
    );
    stop.store(true, Ordering::Relaxed);
    let sent = traffic.join_next().await.unwrap().unwrap();

    // After the reload: every request of a prefix lands on the engine that held it.
    for i in 0..5 {
        for k in 0..3 {
            let (s, _, _) = post(&url, body(k, 2000 + i), &[]).await;
            assert_eq!(s, StatusCode::OK);
        }
    }
    let log = r.access_log();
    assert_eq!(log.len(), 3 + sent + 15);
    let pods = |lines: &[serde_json::Value]| -> Vec<String> {
        lines
            .iter()
            .map(|l| l["selected_pod"].as_str().unwrap().to_owned())
            .collect()
    };
    let want_traffic: Vec<String> = (0..sent).map(|n| holders[n % 3].clone()).collect();
    assert_eq!(pods(&log[3..3 + sent]), want_traffic);
    let want_after: Vec<String> = (0..15).map(|n| holders[n % 3].clone()).collect();
    assert_eq!(pods(&log[3 + sent..]), want_after);
    let mut distinct = holders.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "one engine per prefix: {holders:?}");
    r.router.shutdown().await;
}

/// Engine metrics are scraped from the simulator: waiting/running/KV usage and histograms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_engine_metrics_and_keeps_stale_values() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 50ms",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    for _ in 0..3 {
        let (s, _, _) = post(
            &format!("{}/v1/chat/completions", r.url()),
            chat("m", "hello", false, 4),
            &[],
        )
        .await;
        assert_eq!(s, StatusCode::OK);
    }
    let ep = std::sync::Arc::clone(&r.router.snapshot().endpoints[0]);
    let mut ttft = None;
    for _ in 0..100 {
        ttft = ep.state().ttft_ms;
        if ttft.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ttft = ttft.expect("TTFT never scraped");
    assert!(ttft > 0.0);
    assert!(!ep.state().stale);
    assert_eq!(ep.state().models, vec!["m".to_owned()]);
    // The engine goes away: values are kept and marked stale, never zeroed.
    sim.kill().await;
    for _ in 0..100 {
        if ep.state().stale {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = ep.state().clone();
    assert!(st.stale);
    assert_eq!(st.ttft_ms, Some(ttft));
    assert_eq!(st.models, vec!["m".to_owned()]);
    r.router.shutdown().await;
}

/// Scrapes run at most `metricsScrapeConcurrency` endpoints at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_concurrency_is_bounded() {
    let seen: std::sync::Arc<(
        std::sync::atomic::AtomicUsize,
        std::sync::atomic::AtomicUsize,
    )> = std::sync::Arc::default();
    let mut ups = Vec::new();
    let mut eps = String::new();
    for i in 0..6 {
        let u = Upstream::start(Script::SlowMetrics {
            delay: Duration::from_millis(80),
            seen: std::sync::Arc::clone(&seen),
        })
        .await;
        eps.push_str(&endpoint(&format!("e{i}"), u.addr, "x"));
        ups.push(u);
    }
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h\nmetricsScrapeConcurrency: 2",
        &eps,
        &[
            ("s.yaml", model_server("srv", "u", "x", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let start = Instant::now();
    r.wait_ready().await;
    // 6 endpoints, 2 at a time, 80 ms each: at least three rounds.
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(seen.1.load(std::sync::atomic::Ordering::SeqCst), 2);
    r.router.shutdown().await;
}

/// The router counts, per endpoint, the requests waiting for their first byte and their
/// prompt tokens (`/debug/config_dump/pods`), and `least-prefill` sends the next request
/// away from the endpoint with queued prefill work; both counters return to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_prefill_follows_queued_prompt_tokens() {
    let slow = kthena_sim::spawn(sim_config("m").with_faults(kthena_sim::Faults {
        first_byte_delay_ms: 1500,
        ..kthena_sim::Faults::default()
    }))
    .await
    .unwrap();
    let fast = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let eps = format!(
        "{}{}",
        endpoint("a-slow", slow.addr(), "demo"),
        endpoint("b-fast", fast.addr(), "demo")
    );
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms
scheduler:
  plugins:
    Score:
      enabled:
      - {name: least-prefill, weight: 1}
",
        &eps,
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/completions", r.url());
    let body = serde_json::json!({"model": "m", "prompt": "one two three four five six seven eight", "max_tokens": 2}).to_string();
    // Both idle: the tie goes to the first id, the slow engine, which holds the answer back.
    let mut first = tokio::task::JoinSet::new();
    first.spawn({
        let (url, body) = (url.clone(), body.clone());
        async move { post(&url, body, &[]).await }
    });
    let mut queued = (0, 0);
    for _ in 0..100 {
        queued = r.prefill_counters().await["a-slow"];
        if queued.0 == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        queued.0, 1,
        "the slow engine's request is awaiting its first byte"
    );
    assert!(queued.1 > 0);
    assert_eq!(r.prefill_counters().await["b-fast"], (0, 0));
    // The same prompt again: the slow engine has its tokens queued, the fast one nothing.
    let (status, _, _) = post(&url, body.clone(), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = first.join_next().await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK);
    let log = r.access_log();
    let pods_used: Vec<&str> = log
        .iter()
        .map(|l| l["selected_pod"].as_str().unwrap())
        .collect();
    assert_eq!(pods_used, ["b-fast", "a-slow"]);
    // What was queued is the prompt's token count, as the access log reports it.
    assert_eq!(Some(queued.1), log[1]["input_tokens"].as_u64());
    let after = r.prefill_counters().await;
    assert_eq!(after["a-slow"], (0, 0));
    assert_eq!(after["b-fast"], (0, 0));
    r.router.shutdown().await;
}

/// A streamed chat counts as awaiting its first token until the engine has prefilled the
/// prompt, not merely until response headers or the chat role chunk arrive (vLLM sends the
/// role chunk with the first token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_request_awaits_its_first_token_through_the_prefill() {
    let mut cfg = sim_config("m").with_time_scale(1.0);
    // 600 ms of prefill for a prompt of about 300 tokens, in real time.
    cfg.profile.prefill_per_token_ms = 2.0;
    let sim = kthena_sim::spawn(cfg).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms
scheduler:
  plugins:
    Score:
      enabled:
      - {name: least-prefill, weight: 1}
",
        &endpoint("e1", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let text = "alpha beta gamma delta ".repeat(75);
    let resp = post_stream(
        &format!("{}/v1/chat/completions", r.url()),
        chat("m", &text, true, 3),
        &[],
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    // Headers are here; the prefill is not done: the request still awaits its first token.
    let start = Instant::now();
    let mut body = resp.into_body();
    let (awaiting, pending) = r.prefill_counters().await["e1"];
    assert_eq!(awaiting, 1);
    assert!(pending >= 250, "{pending} tokens pending");
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "first chunk after {waited:?}: {}",
        String::from_utf8_lossy(&first)
    );
    assert_eq!(r.prefill_counters().await["e1"], (0, 0));
    while let Some(f) = body.frame().await {
        f.unwrap();
    }
    assert_eq!(r.prefill_counters().await["e1"], (0, 0));
    r.router.shutdown().await;
}

/// Requests that share a new prompt follow the first one while it is still being prefilled
/// (the KV index's provisional entries are recorded when a request is sent, not when the
/// engine answers), with no KV events at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_prefix_is_followed_before_the_first_answer() {
    let sims = kthena_sim::spawn_many(
        3,
        sim_config("m").with_faults(kthena_sim::Faults {
            first_byte_delay_ms: 1000,
            ..kthena_sim::Faults::default()
        }),
    )
    .await
    .unwrap();
    let eps: String = sims
        .iter()
        .enumerate()
        .map(|(i, s)| endpoint(&format!("e{i}"), s.addr(), "demo"))
        .collect();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms
scheduler:
  plugins:
    Score:
      enabled:
      - {name: least-request, weight: 1}
      - {name: kvcache-aware, weight: 2}
",
        &eps,
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/completions", r.url());
    let prompt = "a shared system prompt that no engine has seen before ".repeat(20);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..3 {
        let body = serde_json::json!({"model": "m", "prompt": format!("{prompt}question {i}"), "max_tokens": 2}).to_string();
        let url = url.clone();
        tasks.spawn(async move { post(&url, body, &[]).await.0 });
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    while let Some(status) = tasks.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
    let pods: Vec<String> = r
        .access_log()
        .iter()
        .map(|l| l["selected_pod"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pods.len(), 3);
    assert!(pods.iter().all(|p| *p == pods[0]), "{pods:?}");
    r.router.shutdown().await;
}
