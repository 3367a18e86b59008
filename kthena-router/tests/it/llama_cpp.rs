//! The router in front of two real llama.cpp `llama-server` engines (SmolLM2-135M on CPU),
//! driven by the official `openai` Python client: chat, completion, streaming, and prefix-cache
//! routing of a repeated long prompt to the engine that already holds it, visible in that
//! engine's `llamacpp:prompt_tokens_cached_total`.
//!
//! The binary and the model come from `scripts/llama-server.sh` (run by `scripts/services.sh`);
//! `LLAMA_SERVER_BIN` and `LLAMA_MODEL` override the cached paths. A missing binary fails the
//! test.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::kv_support;
use crate::kv_support::*;
use http::StatusCode;

const ALIAS: &str = "smollm2-135m";

fn path_from(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

struct Engine {
    port: u16,
    _child: tokio::process::Child,
}

/// A `llama-server` on a free port, with `extra` arguments (`--embeddings` ...).
async fn start_engine(bin: &PathBuf, model: &PathBuf, extra: &[&str]) -> Engine {
    let port = free_port();
    let child = tokio::process::Command::new(bin)
        .args(["-m"])
        .arg(model)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--metrics",
            "-np",
            "2",
            "-c",
            "4096",
            "-t",
            "1",
            // No weight repacking: on CPUs with AMX, llama.cpp's AMX matmul path (picked by
            // the native build) crashes with SIGSEGV while loading the model.
            "--no-repack",
        ])
        .args(["-a", ALIAS, "--log-disable"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    for _ in 0..300 {
        if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_secs(1), async {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await
        })
        .await
        {
            drop(s);
            if get(&format!("http://127.0.0.1:{port}/health")).await.0 == StatusCode::OK {
                return Engine {
                    port,
                    _child: child,
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("llama-server on port {port} did not become healthy");
}

async fn llama_metric(port: u16, name: &str) -> f64 {
    let (status, text) = get(&format!("http://127.0.0.1:{port}/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    metric_in(&text, name)
}

/// The cached `llama-server` binary and model (asserted present).
fn bin_and_model() -> (PathBuf, PathBuf) {
    let bin = path_from(
        "LLAMA_SERVER_BIN",
        "/var/cache/kthena/llama.cpp-11434/bin/llama-server",
    );
    let model = path_from(
        "LLAMA_MODEL",
        "/var/cache/kthena/models/SmolLM2-135M-Instruct.Q4_1.gguf",
    );
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/llama-server.sh (scripts/services.sh does)",
        bin.display()
    );
    assert!(
        model.is_file(),
        "{} is missing: run scripts/llama-server.sh (scripts/services.sh does)",
        model.display()
    );
    (bin, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_through_router_to_llama_cpp() {
    let (bin, model) = bin_and_model();
    let engines = [
        start_engine(&bin, &model, &[]).await,
        start_engine(&bin, &model, &[]).await,
    ];

    // The scraper maps llama.cpp's metrics (the ModelServer says vLLM; the names decide).
    let (_, text) = get(&format!("http://127.0.0.1:{}/metrics", engines[0].port)).await;
    let sample = kthena_engine_metrics::parse_metrics(&text, kthena_engine_metrics::VLLM).unwrap();
    assert_eq!((sample.running, sample.waiting), (0.0, 0.0));
    assert!(sample.tpot.is_some(), "{text}");
    assert_eq!(sample.ttft, None);

    let config = format!(
        "metricsScrapeInterval: 100ms
scheduler:
  pluginConfig:
  - name: prefix-cache
    args: {{blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5}}
  plugins:
    Score:
      enabled:
      - {{name: prefix-cache, weight: 2}}
      - {{name: least-request, weight: 1}}
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: llama-0, address: \"127.0.0.1:{}\", labels: {{app: llama}}}}
  - {{name: llama-1, address: \"127.0.0.1:{}\", labels: {{app: llama}}}}
",
        engines[0].port, engines[1].port
    );
    let r = KvRouter::start(&config, &manifests(ALIAS, "llama")).await;
    r.wait_ready().await;
    let v = kv_support::common::run_python_client("openai_llama.py", r.url(), "public").await;
    assert_eq!(v["chat"]["model"], ALIAS, "{v}");
    assert!(v["chat"]["content_len"].as_u64().unwrap() > 0, "{v}");
    assert!(v["chat"]["prompt_tokens"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["completion"]["completion_tokens"].as_u64().unwrap() > 0,
        "{v}"
    );
    assert!(v["stream"]["chunks"].as_u64().unwrap() >= 2, "{v}");
    assert!(v["stream"]["text_len"].as_u64().unwrap() > 0, "{v}");

    let log = r.access_log();
    let pod_of = |id: &str| -> String {
        let e = log
            .iter()
            .find(|e| e["request_id"] == id)
            .unwrap_or_else(|| panic!("no access-log line for {id}"));
        assert_eq!(e["status_code"], 200, "{e}");
        e["selected_pod"].as_str().unwrap().to_owned()
    };
    let (busy, a1, a2) = (pod_of("busy"), pod_of("A1"), pod_of("A2"));
    // least-request steered A1 away from the busy engine; the repeat follows A1 (prefix
    // cache), not the idle tie-break order.
    assert_ne!(a1, busy);
    assert_eq!(a2, a1);
    let prompt_tokens = v["A2"]["prompt_tokens"].as_u64().unwrap();
    let cached = v["A2"]["cached_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 500, "{v}");
    assert!(
        cached * 10 >= prompt_tokens * 9,
        "A2 reused only {cached} of {prompt_tokens} tokens: {v}"
    );
    let a_port = if a1 == "llama-0" {
        engines[0].port
    } else {
        engines[1].port
    };
    let other_port = if a1 == "llama-0" {
        engines[1].port
    } else {
        engines[0].port
    };
    let on_a = llama_metric(a_port, "llamacpp:prompt_tokens_cached_total").await;
    let on_other = llama_metric(other_port, "llamacpp:prompt_tokens_cached_total").await;
    assert!(
        on_a >= cached as f64,
        "{a1}: llamacpp:prompt_tokens_cached_total {on_a} < {cached}"
    );
    assert!(
        on_other < cached as f64,
        "the other engine cached {on_other} tokens"
    );
    r.router.shutdown().await;
}

/// `/v1/embeddings` through the router to a llama.cpp server started with `--embeddings`:
/// routed by model (the route's name rewritten to the engine's alias), a 576-dimension
/// vector (SmolLM2-135M's hidden size), the prompt tokens counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_through_router_to_llama_cpp() {
    let (bin, model) = bin_and_model();
    let engine = start_engine(&bin, &model, &["--embeddings", "--pooling", "mean"]).await;
    let config = format!(
        "metricsScrapeInterval: 100ms
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: llama-emb, address: \"127.0.0.1:{}\", labels: {{app: llama}}}}
",
        engine.port
    );
    let r = KvRouter::start(&config, &manifests(ALIAS, "llama")).await;
    r.wait_ready().await;
    let body = r#"{"model":"public","input":["hello world","the quick brown fox"]}"#;
    let (status, _, b) =
        kv_support::common::post(&format!("{}/v1/embeddings", r.url()), body, &[]).await;
    assert_eq!(status, StatusCode::OK, "{b:?}");
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{v}");
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i, "{v}");
        assert_eq!(d["embedding"].as_array().unwrap().len(), 576, "{v}");
    }
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0, "{v}");
    let log = r.access_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["path"], "/v1/embeddings");
    assert_eq!(log[0]["model_name"], "public");
    assert_eq!(log[0]["selected_pod"], "llama-emb");
    assert_eq!(log[0]["status_code"], 200);
    r.router.shutdown().await;
}
