//! Cost-model tests over real sockets: prefix-cache hits, queueing, KV usage and eviction.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use crate::common::{metric, metrics, post_json};
use kthena_sim::{Config, spawn};
use serde_json::json;

fn cfg() -> Config {
    Config::default()
        .with_ephemeral_port()
        .with_model("m")
        .with_time_scale(20.0)
}

fn prompt(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| seed.wrapping_mul(1_000_003).wrapping_add(i) % 150_000)
        .collect()
}

#[tokio::test]
async fn second_identical_4096_token_prompt_hits_the_prefix_cache() {
    let sim = spawn(cfg()).await.unwrap();
    let base = sim.base_url();
    let url = format!("{base}/v1/completions");
    let req = json!({"model": "m", "prompt": prompt(1, 4096), "max_tokens": 1});

    let (status, _) = post_json(&url, &req).await;
    assert_eq!(status, 200);
    let m1 = metrics(&base).await;
    let cold = metric(&m1, "vllm:time_to_first_token_seconds_sum");
    let (status, _) = post_json(&url, &req).await;
    assert_eq!(status, 200);
    let m2 = metrics(&base).await;
    let warm = metric(&m2, "vllm:time_to_first_token_seconds_sum") - cold;

    // Default profile: cold = 5 ms + 4096 x 0.03 ms; warm recomputes one block of 16 tokens
    // (vLLM never serves the last prompt token from cache).
    assert!((cold - 0.12788).abs() < 1e-9, "cold TTFT {cold}");
    assert!((warm - 0.00548).abs() < 1e-9, "warm TTFT {warm}");
    assert!(cold / warm >= 5.0);
    assert_eq!(metric(&m1, "vllm:prefix_cache_hits_total"), 0.0);
    assert_eq!(metric(&m2, "vllm:prefix_cache_hits_total"), 4080.0);
    assert_eq!(metric(&m2, "vllm:prefix_cache_queries_total"), 8192.0);
    assert_eq!(metric(&m2, "vllm:prompt_tokens_total"), 8192.0);

    // A different LoRA-free prompt sharing the first 2048 tokens hits exactly 2048.
    let mut p = prompt(1, 2048);
    p.extend(prompt(2, 100));
    let (status, _) = post_json(&url, &json!({"model": "m", "prompt": p, "max_tokens": 1})).await;
    assert_eq!(status, 200);
    let m3 = metrics(&base).await;
    assert_eq!(metric(&m3, "vllm:prefix_cache_hits_total"), 4080.0 + 2048.0);
    sim.kill().await;
}

#[tokio::test]
async fn more_requests_than_max_num_seqs_wait_and_ttft_grows() {
    let mut c = cfg();
    c.profile.max_num_seqs = 4;
    let sim = spawn(c).await.unwrap();
    let base = sim.base_url();
    let url = format!("{base}/v1/completions");

    // Baseline: one request alone.
    let (status, _) = post_json(
        &url,
        &json!({"model": "m", "prompt": prompt(9, 64), "max_tokens": 40}),
    )
    .await;
    assert_eq!(status, 200);
    let alone = metric(
        &metrics(&base).await,
        "vllm:time_to_first_token_seconds_sum",
    );

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..12u32 {
        let url = url.clone();
        tasks.spawn(async move {
            post_json(
                &url,
                &json!({"model": "m", "prompt": prompt(100 + i, 64), "max_tokens": 40}),
            )
            .await
            .0
        });
    }
    let mut max_waiting = 0.0f64;
    let mut max_running = 0.0f64;
    while tasks.len() == 12 || max_waiting == 0.0 {
        let text = metrics(&base).await;
        max_waiting = max_waiting.max(metric(&text, "vllm:num_requests_waiting"));
        max_running = max_running.max(metric(&text, "vllm:num_requests_running"));
        if tasks.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        if let Some(Ok(status)) = tasks.try_join_next() {
            assert_eq!(status, 200);
        }
    }
    while let Some(r) = tasks.join_next().await {
        assert_eq!(r.unwrap(), 200);
    }
    assert!(max_waiting > 0.0, "waiting never rose");
    assert_eq!(max_running, 4.0);
    let text = metrics(&base).await;
    let n = metric(&text, "vllm:time_to_first_token_seconds_count") - 1.0;
    let mean = (metric(&text, "vllm:time_to_first_token_seconds_sum") - alone) / n;
    assert_eq!(n, 12.0);
    // Two thirds of the requests wait for at least one full batch (40 decode steps).
    assert!(mean > 5.0 * alone, "mean TTFT {mean} vs alone {alone}");
    assert!(metric(&text, "vllm:request_queue_time_seconds_sum") > 0.0);
    sim.kill().await;
}

#[tokio::test]
async fn kv_usage_tracks_resident_blocks_and_eviction_keeps_it_bounded() {
    let mut c = cfg();
    c.profile.num_gpu_blocks = 64; // 1024 tokens
    c.profile.max_model_len = 1024;
    let sim = spawn(c).await.unwrap();
    let base = sim.base_url();
    let url = format!("{base}/v1/completions");

    // One 512-token request decoding for a while holds 32..=35 blocks.
    let mut long = tokio::task::JoinSet::new();
    long.spawn({
        let url = url.clone();
        async move {
            post_json(
                &url,
                &json!({"model": "m", "prompt": prompt(1, 512), "max_tokens": 40}),
            )
            .await
            .0
        }
    });
    let mut seen = 0.0f64;
    let status = loop {
        if let Some(r) = long.try_join_next() {
            break r.unwrap();
        }
        let u = metric(&metrics(&base).await, "vllm:kv_cache_usage_perc");
        seen = seen.max(u);
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_eq!(status, 200);
    assert!((32.0 / 64.0..=35.0 / 64.0).contains(&seen), "usage {seen}");
    // Finished: its blocks stay cached but are free, so usage drops to 0.
    assert_eq!(
        metric(&metrics(&base).await, "vllm:kv_cache_usage_perc"),
        0.0
    );

    // Concurrent prompts that together exceed the cache: usage never exceeds 1 and all finish.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6u32 {
        let url = url.clone();
        tasks.spawn(async move {
            post_json(
                &url,
                &json!({"model": "m", "prompt": prompt(10 + i, 400), "max_tokens": 30}),
            )
            .await
            .0
        });
    }
    let mut max_usage = 0.0f64;
    while !tasks.is_empty() {
        let u = metric(&metrics(&base).await, "vllm:kv_cache_usage_perc");
        assert!(u <= 1.0);
        max_usage = max_usage.max(u);
        while let Some(r) = tasks.try_join_next() {
            assert_eq!(r.unwrap(), 200);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(max_usage > 0.5, "max usage {max_usage}");
    // The first prompt's blocks were evicted: asking again hits nothing.
    let before = metric(&metrics(&base).await, "vllm:prefix_cache_hits_total");
    let (status, _) = post_json(
        &url,
        &json!({"model": "m", "prompt": prompt(1, 512), "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        metric(&metrics(&base).await, "vllm:prefix_cache_hits_total"),
        before
    );
    sim.kill().await;
}
