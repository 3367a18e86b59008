//! Helpers of the dashboard test: a real Prometheus scraping real `kthena-router` processes
//! and kthena-sim engines, and the mixed workload that gives every dashboard panel data.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};

use crate::common::{chat, client, endpoint, free_port, get, model_server, post, simple_route};
use crate::kv_support::qwen3_dir;

/// How long a process gets to answer its readiness check.
const READY: Duration = Duration::from_secs(30);

/// A real Prometheus (Debian's `prometheus`, installed by `scripts/services.sh`; the binary
/// is `$PROMETHEUS_BIN` when set) scraping `jobs` every second; stopped when dropped.
pub(crate) struct Prometheus {
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

impl Prometheus {
    /// Starts Prometheus with one scrape job per `(job, targets)`, every second.
    pub(crate) async fn start(jobs: &[(&str, Vec<SocketAddr>)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config =
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n".to_owned();
        for (job, targets) in jobs {
            let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
            config += &format!(
                "- job_name: {job}\n  static_configs: [{{targets: [{}]}}]\n",
                list.join(", ")
            );
        }
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let bin = std::env::var("PROMETHEUS_BIN").unwrap_or_else(|_| "prometheus".to_owned());
        let child = tokio::process::Command::new(&bin)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin} (scripts/services.sh installs it): {e}"));
        let url = format!("http://127.0.0.1:{port}");
        wait_ok(&format!("{url}/-/ready")).await;
        Self {
            _child: child,
            _dir: dir,
            url,
        }
    }

    /// `POST /api/v1/<api>` with the form `params`; the answer's `data` (panics unless
    /// `status` is `success`).
    pub(crate) async fn api(&self, api: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let body: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect();
        let req = http::Request::post(format!("{}/api/v1/{api}", self.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(body.join("&"))))
            .unwrap();
        let resp = client().request(req).await.unwrap();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["status"], "success", "{api} {params:?}: {v}");
        v["data"].clone()
    }

    /// The series an instant query returns now.
    pub(crate) async fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let data = self.api("query", &[("query", expr)]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `GET url` until it answers 200 (at most [`READY`]).
async fn wait_ok(url: &str) {
    let deadline = tokio::time::Instant::now() + READY;
    loop {
        let req = http::Request::get(url)
            .body(Full::new(Bytes::new()))
            .unwrap();
        if let Ok(resp) = client().request(req).await
            && resp.status() == StatusCode::OK
        {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{url} never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `kthena-router` process (the binary) from a config file; killed when dropped.
pub(crate) struct RouterProcess {
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
    /// Inference listener.
    pub addr: SocketAddr,
    /// Prometheus listener.
    pub metrics: SocketAddr,
}

impl RouterProcess {
    /// Writes `router.yaml` (`config`, then `standalone` with `manifests` and `endpoints`)
    /// and starts the binary with environment `env`; waits for `/readyz`.
    pub(crate) async fn start(
        config: &str,
        endpoints: &str,
        manifests: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifests.yaml"), manifests).unwrap();
        let cfg = format!(
            "{config}\nstandalone:\n  manifests: [manifests.yaml]\n  endpoints:\n{endpoints}"
        );
        let path = dir.path().join("router.yaml");
        std::fs::write(&path, cfg).unwrap();
        let [port, metrics, debug] = distinct_ports();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena-router"))
            .arg("--config")
            .arg(&path)
            .args([
                format!("--port={port}"),
                format!("--metrics-port={metrics}"),
                format!("--debug-port={debug}"),
            ])
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_ok(&format!("http://{addr}/readyz")).await;
        Self {
            _child: child,
            _dir: dir,
            addr,
            metrics: ([127, 0, 0, 1], metrics).into(),
        }
    }

    /// `http://addr`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Three ports on 127.0.0.1 that were free a moment ago, all different (bound together,
/// then released).
fn distinct_ports() -> [u16; 3] {
    let listeners: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let port = |i: usize| listeners[i].local_addr().unwrap().port();
    [port(0), port(1), port(2)]
}

/// A path's `display()` for a YAML string.
fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The Qwen3 tokenizer entry of `kvCache.tokenizers` for `engine-model`.
fn tokenizer_entry() -> String {
    let dir: PathBuf = qwen3_dir();
    format!(
        "  - {{model: engine-model, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}\n",
        p(&dir.join("tokenizer.json")),
        p(&dir.join("tokenizer_config.json"))
    )
}

/// Router A, Go Kthena's layout: `prefix-cache` and `kvcache-aware` on a Redis index that
/// cannot be reached (lookups timed and counted as errors), the fairness queue in slot mode,
/// a route `public`, a route `limited` with a token rate limit of 1 input token an hour, and a
/// route `cold` to a ModelServer without endpoints whose requests are held 300 ms (a model at
/// zero replicas that does not wake in time).
pub(crate) async fn router_go_layout(sims: &[SocketAddr]) -> RouterProcess {
    let config = format!(
        "metricsScrapeInterval: 100ms
coldStart: {{holdTimeout: 300ms, retryAfter: 5s}}
kvCache:
  index: redis
  redis: {{url: \"redis://127.0.0.1:1\", timeout: 200ms, gcInterval: 0s}}
  remoteTokenize: false
  tokenizers:
{}scheduler:
  pluginConfig:
  - name: prefix-cache
    args: {{blockSizeToHash: 16, maxBlocksToMatch: 64, maxHashCacheSize: 8, topKMatches: 5}}
  plugins:
    Score:
      enabled:
      - {{name: least-request, weight: 1}}
      - {{name: prefix-cache, weight: 1}}
      - {{name: kvcache-aware, weight: 1}}",
        tokenizer_entry()
    );
    let eps: String = sims
        .iter()
        .enumerate()
        .map(|(i, a)| endpoint(&format!("engine-{i}"), *a, "demo"))
        .collect();
    let manifests = format!(
        "{}---\n{}---\n{}  rateLimit: {{inputTokensPerUnit: 1, unit: hour}}\n---\n{}---\n{}",
        model_server("srv", "engine-model", "demo", ""),
        simple_route("route", "public", "srv"),
        simple_route("route-limited", "limited", "srv"),
        model_server("srv-cold", "engine-model", "cold", ""),
        simple_route("route-cold", "cold", "srv-cold"),
    );
    let env = [
        ("ENABLE_FAIRNESS_SCHEDULING", "true"),
        ("FAIRNESS_MAX_CONCURRENT", "2"),
        ("FAIRNESS_METRICS_RAW_USER_ID", "true"),
    ];
    RouterProcess::start(&config, &eps, &manifests, &env).await
}

/// Router B, the in-process KV index: `kvcache-aware` fed by the engine's KV events.
pub(crate) async fn router_kv_events(sim: SocketAddr, events_port: u16) -> RouterProcess {
    let config = format!(
        "metricsScrapeInterval: 100ms
kvCache:
  remoteTokenize: false
  tokenizers:
{}scheduler:
  pluginConfig:
  - name: kvcache-aware
    args: {{blockSizeToHash: 16, maxBlocksToMatch: 256}}
  plugins:
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 2}}
      - {{name: least-request, weight: 1}}",
        tokenizer_entry()
    );
    let eps = format!(
        "  - {{name: engine-kv, address: \"{sim}\", labels: {{app: kv}}, kvEvents: \"tcp://127.0.0.1:{events_port}\"}}\n"
    );
    let manifests = format!(
        "{}---\n{}",
        model_server("srv-kv", "engine-model", "kv", ""),
        simple_route("route", "public", "srv-kv"),
    );
    RouterProcess::start(&config, &eps, &manifests, &[]).await
}

/// A chat to `public`: a system prompt of 572 bytes shared by every request (the router's
/// prompt-prefix tokenization cache keeps it, the engines' prefix caches hold its blocks),
/// then the user's `text`.
fn with_system(text: &str, stream: bool, max_tokens: u32) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": "public",
        "messages": [
            {"role": "system", "content": "You are a careful assistant of the operations team. ".repeat(11)},
            {"role": "user", "content": text},
        ],
        "max_tokens": max_tokens,
    });
    if stream {
        body["stream"] = true.into();
    }
    body
}

/// One round of the mixed workload on router A: concurrent chats (half streamed) of four
/// users sharing a long prompt prefix, a completion, an unknown model (404), a
/// rate-limited route (429), a model that stays at zero (held, then 503) and a request with
/// two `Authorization` headers (400).
pub(crate) async fn round_go_layout(r: &RouterProcess, round: usize) {
    let url = format!("{}/v1/chat/completions", r.url());
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..8 {
        let url = url.clone();
        let mut body = with_system(&format!("question {round}-{i}"), i % 2 == 0, 8);
        body["user"] = format!("user-{}", i % 4).into();
        calls.spawn(async move { post(&url, body.to_string(), &[]).await.0 });
    }
    while let Some(status) = calls.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
    let completion =
        serde_json::json!({"model": "public", "prompt": "hello there", "max_tokens": 4});
    let (status, _, _) = post(
        &format!("{}/v1/completions", r.url()),
        completion.to_string(),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = post(&url, chat("no-such-model", "hi", false, 2), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = post(&url, chat("limited", "hello there", false, 2), &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _, _) = post(&url, chat("cold", "hello", false, 2), &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // Two `Authorization` headers: refused before the body is read (400), counted by
    // `kthena_router_auth_failures_total{reason="bad_header"}` (authentication is off here).
    let two = [("authorization", "Bearer a"), ("authorization", "Bearer b")];
    let (status, _, _) = post(&url, chat("public", "hi", false, 2), &two).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// One round on router B: three chats sharing a prompt prefix (the engine's KV events fill
/// the index, the later ones match it).
pub(crate) async fn round_kv_events(r: &RouterProcess, round: usize) {
    for i in 0..3 {
        let (status, _, body) = post(
            &format!("{}/v1/chat/completions", r.url()),
            with_system(&format!("follow-up {round}-{i}"), false, 4).to_string(),
            &[],
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
}

/// The `/metrics` text of a router (for failure messages).
pub(crate) async fn exposition(r: &RouterProcess) -> String {
    get(&format!("http://{}/metrics", r.metrics)).await.1
}
