//! Router overhead: the latency of a request sent straight to an engine against the same
//! request sent through the router, in the same run, with a zero-latency engine (kthena-sim
//! at a huge time scale, so the engine's own work is negligible).
//!
//! Prints median and p99 of both paths (interleaved samples) and their difference, then runs
//! the criterion comparison. Run with
//! `cargo bench -p kthena-router --bench overhead -- --warm-up-time 1 --measurement-time 2`.
#![allow(clippy::unwrap_used, reason = "a benchmark aborts on any setup error")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its numbers")]

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kthena_router::{Overrides, Router};
use tokio::runtime::Runtime;
use tokio::time::Instant;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

struct Setup {
    rt: Runtime,
    client: HttpClient,
    direct: String,
    routed: String,
    _sim: kthena_sim::SimHandle,
    _router: Router,
    _dir: tempfile::TempDir,
}

const BODY: &str = r#"{"model":"m","prompt":"hello","max_tokens":1}"#;

fn setup() -> Setup {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sim, router, dir) = rt.block_on(async {
        let sim = kthena_sim::spawn(
            kthena_sim::Config::default().with_ephemeral_port().with_model("m").with_time_scale(1.0e6),
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("m.yaml"),
            "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: srv}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: m}}
  workloadPort: {port: 8000}
---
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: r}
spec:
  modelName: m
  rules: [{targetModels: [{modelServerName: srv}]}]
",
        )
        .unwrap();
        let cfg = format!(
            "accessLog: {{enabled: false}}\nstandalone:\n  manifests: [m.yaml]\n  endpoints:\n  - {{name: sim, address: \"{}\", labels: {{app: m}}}}\n",
            sim.addr()
        );
        let path = dir.path().join("router.yaml");
        std::fs::write(&path, cfg).unwrap();
        let ov = Overrides { port: Some(0), metrics_port: Some(0), debug_port: Some(0), ..Overrides::default() };
        let cfg = kthena_router::load_config(&path, &HashMap::<String, String>::new(), ov).unwrap();
        let router = Router::start(cfg, Some(path), ov).await.unwrap();
        (sim, router, dir)
    });
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    Setup {
        direct: format!("{}/v1/completions", sim.base_url()),
        routed: format!("http://{}/v1/completions", router.addr),
        rt,
        client,
        _sim: sim,
        _router: router,
        _dir: dir,
    }
}

async fn one(client: &HttpClient, url: &str) -> Duration {
    let start = Instant::now();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert!(resp.status().is_success());
    resp.into_body().collect().await.unwrap();
    start.elapsed()
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn percentiles(s: &Setup) {
    let n = 2000;
    let (mut direct, mut routed) = (Vec::with_capacity(n), Vec::with_capacity(n));
    s.rt.block_on(async {
        for _ in 0..200 {
            one(&s.client, &s.direct).await;
            one(&s.client, &s.routed).await;
        }
        for _ in 0..n {
            direct.push(one(&s.client, &s.direct).await);
            routed.push(one(&s.client, &s.routed).await);
        }
    });
    direct.sort();
    routed.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (dm, d99, rm, r99) = (
        pct(&direct, 0.5),
        pct(&direct, 0.99),
        pct(&routed, 0.5),
        pct(&routed, 0.99),
    );
    println!("overhead ({n} interleaved requests each, zero-latency engine, same run):");
    println!(
        "  direct to engine : median {:8.1} us   p99 {:8.1} us",
        us(dm),
        us(d99)
    );
    println!(
        "  through router   : median {:8.1} us   p99 {:8.1} us",
        us(rm),
        us(r99)
    );
    println!(
        "  router overhead  : median {:+8.1} us ({:.2}x)   p99 {:+8.1} us ({:.2}x)",
        us(rm) - us(dm),
        us(rm) / us(dm),
        us(r99) - us(d99),
        us(r99) / us(d99)
    );
}

fn bench(c: &mut Criterion) {
    let s = setup();
    percentiles(&s);
    let mut g = c.benchmark_group("overhead");
    g.bench_function("direct", |b| {
        b.iter(|| s.rt.block_on(one(&s.client, &s.direct)))
    });
    g.bench_function("through_router", |b| {
        b.iter(|| s.rt.block_on(one(&s.client, &s.routed)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
