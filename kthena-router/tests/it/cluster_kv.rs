//! Precise KV-cache routing in cluster mode: engine pods on the real API server (the simulated
//! node runs a kthena-sim engine per pod) whose arguments carry vLLM's `--kv-events-config`;
//! the router finds each pod's publisher from those arguments, subscribes at `podIP:port`,
//! and sends a repeated long prompt to the pod holding it.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use http::StatusCode;
use serde_json::json;
use tokio::time::Instant;

use crate::cluster_support::{ClusterRouter, Node, apply, model_route, model_server};
use crate::common::get;
use crate::kv_support::{metric_in, post_json, qwen3_dir};

/// A system prompt of about 700 Qwen3 tokens.
fn long_system_prompt() -> String {
    let mut s = "You are the assistant of a large library. Follow these rules.\n".to_owned();
    for i in 0..80 {
        s.push_str(&format!(
            "Rule {i}: answer questions about shelf {} politely and cite section {}.\n",
            i * 3,
            i * 7 % 13
        ));
    }
    s
}

fn router_config(model: &str) -> String {
    let dir = qwen3_dir();
    format!(
        "metricsScrapeInterval: 100ms
scheduler:
  pluginConfig:
  - name: kvcache-aware
    args: {{blockSizeToHash: 16, maxBlocksToMatch: 256}}
  plugins:
    Filter: {{enabled: []}}
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 2}}
      - {{name: least-request, weight: 1}}
kvCache:
  remoteTokenize: false
  tokenizers:
  - {{model: {model}, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}
",
        dir.join("tokenizer.json").display(),
        dir.join("tokenizer_config.json").display(),
    )
}

/// The engines' configuration: Qwen3's tokenizer (the block hashes of the events are over
/// its token ids), enough blocks for every prompt of the test.
fn engine(model: &str) -> kthena_sim::Config {
    let mut c = kthena_sim::Config::default()
        .with_model(model)
        .with_time_scale(100.0);
    c.tokenizer = Some(qwen3_dir().join("tokenizer.json"));
    c.profile.num_gpu_blocks = 512;
    c.profile.max_model_len = 4096;
    c
}

/// The debug dump's KV-event subscriptions.
async fn subscriptions(r: &ClusterRouter) -> Vec<serde_json::Value> {
    let (status, body) = get(&format!(
        "http://{}/debug/config_dump/kvevents",
        r.router.debug_addr
    ))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["kvevents"].as_array().cloned().unwrap_or_default()
}

/// Waits until the router holds a `subscribed` subscription for exactly `pods`.
async fn wait_subscribed(r: &ClusterRouter, ns: &str, pods: &[&str]) -> Vec<serde_json::Value> {
    let want: Vec<String> = pods.iter().map(|p| format!("{ns}/{p}")).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let subs = subscriptions(r).await;
        let got: Vec<String> = subs
            .iter()
            .filter(|s| s["state"] == "subscribed")
            .map(|s| s["endpoint"].as_str().unwrap().to_owned())
            .collect();
        if got == want {
            return subs;
        }
        assert!(
            Instant::now() < deadline,
            "subscriptions {subs:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn chat(r: &ClusterRouter, model: &str, system: &str, question: &str) -> String {
    let body = json!({
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 4,
    });
    let (status, v) = post_json(&format!("{}/v1/chat/completions", r.url()), &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    r.served_by().last().unwrap().0.clone()
}

/// Waits until the router's KV index holds entries (the first prompt's blocks arrived).
async fn wait_indexed(r: &ClusterRouter) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = get(&format!("http://{}/metrics", r.router.metrics_addr)).await;
        if metric_in(&text, "kthena_router_kv_index_entries") > 0.0 {
            return;
        }
        assert!(Instant::now() < deadline, "no KV events reached the index");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_pods_with_kv_events_config_get_their_cached_prompts() {
    let ns = kthena_testenv::namespace("cluster-kv").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-model");
    let node = Node::start_with(&ns, engine(&model));
    let kv_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    // vLLM's form: Go Kthena's examples/model-serving/gpu-kvcache-aware.yaml.
    let kv_config = format!(r#"{{"enable_kv_cache_events":true,"endpoint":"tcp://*:{kv_port}"}}"#);
    let pods = ["pod-a", "pod-b", "pod-c"];
    for p in pods {
        node.pod_with_args(p, "kv", &model, &["--kv-events-config", &kv_config])
            .await;
    }
    apply(
        &ns,
        &[model_server(&n, "ms", &model, "kv", node.port)],
        &[model_route(&n, "route", &model, "ms")],
    )
    .await;
    let r = ClusterRouter::start_raw(ns.client().clone(), &router_config(&model)).await;
    r.wait_ready().await;
    r.wait_endpoints(&n, "ms", &pods, Duration::from_secs(30))
        .await;
    let subs = wait_subscribed(&r, &n, &pods).await;
    // Each subscription dials the pod's own address at the configured port.
    let snap = r.router.snapshot();
    for s in &subs {
        let ep = snap
            .endpoints
            .iter()
            .find(|e| format!("{}/{}", e.namespace, e.name) == s["endpoint"].as_str().unwrap())
            .unwrap();
        let want = format!("tcp://{}:{kv_port}", ep.socket.ip());
        assert_eq!(s["address"], want.as_str(), "{s}");
    }
    drop(snap);

    let system = long_system_prompt();
    let first = chat(&r, &model, &system, "Where is shelf 9?").await;
    wait_indexed(&r).await;
    let mut served = vec![first.clone()];
    for i in 1..20 {
        served.push(chat(&r, &model, &system, &format!("Where is shelf {i}?")).await);
    }
    let share = served.iter().filter(|p| **p == first).count() as f64 / served.len() as f64;
    assert!(
        (share - 1.0).abs() < f64::EPSILON,
        "share {share:.2}: {served:?}"
    );

    // The pod holding the prompt goes away: its subscription and entries go with it, and the
    // prompt is served by another pod without an error.
    node.delete(&first).await;
    let rest: Vec<&str> = pods.iter().copied().filter(|p| *p != first).collect();
    r.wait_endpoints(&n, "ms", &rest, Duration::from_secs(30))
        .await;
    wait_subscribed(&r, &n, &rest).await;
    for i in 0..3 {
        let pod = chat(&r, &model, &system, &format!("And shelf {i}?")).await;
        assert!(
            rest.contains(&pod.as_str()),
            "{pod} after {first} was deleted"
        );
    }
}
