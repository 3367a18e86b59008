//! Helpers of the KV-cache routing tests: a router started from YAML text, HTTP calls, and
//! `/metrics` lookups.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use kthena_router::Router;

pub(crate) use crate::common;
pub(crate) use common::{get, start_router_at};

/// `/work/shared/tokenizers/qwen3` (found relative to the crate first).
pub(crate) fn qwen3_dir() -> PathBuf {
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/tokenizers/qwen3")
    }
}

/// `/work/shared/spec/samples/vllm-0.32-cpu` (found relative to the crate first).
pub(crate) fn vllm_samples() -> PathBuf {
    let local =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/spec/samples/vllm-0.32-cpu");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/spec/samples/vllm-0.32-cpu")
    }
}

/// A ModelServer selecting `app` plus a route `public → server`.
pub(crate) fn manifests(model: &str, app: &str) -> String {
    format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {{name: srv, namespace: default}}
spec:
  model: {model}
  inferenceEngine: vLLM
  workloadSelector: {{matchLabels: {{app: {app}}}}}
  workloadPort: {{port: 8000}}
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {{name: route, namespace: default}}
spec:
  modelName: public
  rules:
  - targetModels: [{{modelServerName: srv}}]
"
    )
}

/// A router started from a config file in a temporary folder.
pub(crate) struct KvRouter {
    pub dir: tempfile::TempDir,
    pub router: Router,
}

impl KvRouter {
    /// Writes `manifests.yaml` and `router.yaml` (`config` + a JSON access log +
    /// `standalone.manifests`), then starts a router on ephemeral ports.
    pub(crate) async fn start(config: &str, manifests: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifests.yaml"), manifests).unwrap();
        std::fs::write(dir.path().join("router.yaml"), Self::text(&dir, config)).unwrap();
        let router = start_router_at(&dir.path().join("router.yaml")).await;
        Self { dir, router }
    }

    fn text(dir: &tempfile::TempDir, config: &str) -> String {
        let log = dir.path().join("access.log");
        format!(
            "{config}\naccessLog: {{format: json, output: \"{}\"}}\n",
            log.display()
        )
    }

    /// Rewrites `router.yaml` (the router reloads it).
    pub(crate) fn rewrite(&self, config: &str) {
        let tmp = self.dir.path().join("router.yaml.tmp");
        std::fs::write(&tmp, Self::text(&self.dir, config)).unwrap();
        std::fs::rename(tmp, self.dir.path().join("router.yaml")).unwrap();
    }

    /// `http://addr`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.router.addr)
    }

    /// Access-log lines written so far.
    pub(crate) fn access_log(&self) -> Vec<serde_json::Value> {
        self.router.flush_access_log();
        let text = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The `/metrics` text.
    pub(crate) async fn metrics(&self) -> String {
        get(&format!("http://{}/metrics", self.router.metrics_addr))
            .await
            .1
    }

    /// The value of one exact series of `/metrics` (0 when absent).
    pub(crate) async fn metric(&self, series: &str) -> f64 {
        metric_in(&self.metrics().await, series)
    }

    /// Polls `series` until `pred` holds (at most `timeout`); returns the last value.
    pub(crate) async fn wait_metric(
        &self,
        series: &str,
        timeout: Duration,
        pred: impl Fn(f64) -> bool,
    ) -> f64 {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let v = self.metric(series).await;
            if pred(v) || tokio::time::Instant::now() > deadline {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every endpoint was scraped once.
    pub(crate) async fn wait_ready(&self) {
        for _ in 0..300 {
            if get(&format!("{}/readyz", self.url())).await.0 == StatusCode::OK {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("router never became ready");
    }
}

/// The value of one exact series line of a `/metrics` text (0 when absent).
pub(crate) fn metric_in(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// `POST` JSON → (status, parsed body).
pub(crate) async fn post_json(
    url: &str,
    body: &serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    let req = Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = common::client().request(req).await.unwrap();
    let status = resp.status();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&b)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&b).into_owned()));
    (status, v)
}
