//! The example gateway in front of three kthena-sim engines on 127.0.0.1: a repeated long
//! prefix goes back to the engine that holds it, learned from the gateway's own decisions
//! (`prefix-cache`) or from the engines' KV events alone (`kvcache-aware`). Where requests
//! went is read from each engine's own `/metrics`.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kthena_sim::SimHandle;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora::services::listening::Service;
use pingora_gateway::{Config, Engine, Gateway, KvEvents};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

/// Three engines, a gateway in front of them, and what the test reads from both.
struct Setup {
    sims: Vec<SimHandle>,
    url: String,
    scheduler: std::sync::Arc<kthena_sched::Scheduler>,
    kv: Option<KvEvents>,
    client: Client<HttpConnector, Full<Bytes>>,
    _shutdown: watch::Sender<bool>,
    _tasks: JoinSet<()>,
}

impl Setup {
    /// Starts the engines (publishing KV events when `kv_events`) and a gateway with the
    /// example configuration's `listen`/`model` and the given scheduler section.
    async fn start(scheduler: &str, kv_events: bool) -> Self {
        let mut sim = kthena_sim::Config::default()
            .with_model(MODEL)
            .with_time_scale(100.0);
        sim.kv_events_port = kv_events.then_some(0);
        let sims = kthena_sim::spawn_many(3, sim).await.unwrap();
        let mut config = example_config();
        config.scheduler = kthena_sched::Config::from_yaml(scheduler).unwrap();
        config.engines = (sims.iter())
            .map(|s| Engine {
                address: s.addr(),
                kv_events: s.kv_events_port().map(|p| format!("tcp://127.0.0.1:{p}")),
            })
            .collect();
        let gateway = Gateway::new(&config).unwrap();
        let scheduler = gateway.scheduler().clone();
        let kv = gateway.kv_events();
        let (tx, rx) = watch::channel(false);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut tasks = JoinSet::new();
        if let Some(kv) = kv.clone() {
            let rx = rx.clone();
            tasks.spawn(async move { kv.start(rx).await });
        }
        tasks.spawn(serve(gateway, listener, rx));
        Self {
            sims,
            url,
            scheduler,
            kv,
            client: Client::builder(TokioExecutor::new()).build_http(),
            _shutdown: tx,
            _tasks: tasks,
        }
    }

    async fn call(&self, method: &str, url: &str, body: Option<&Value>) -> (u16, String) {
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let req = http::Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .unwrap();
        let resp = self.client.request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// `POST` through the gateway; returns the response JSON (asserting 200).
    async fn post(&self, path: &str, body: &Value) -> Value {
        let (status, text) = self
            .call("POST", &format!("{}{path}", self.url), Some(body))
            .await;
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Sum of one counter over its label sets on engine `i`'s `/metrics`.
    async fn counter(&self, i: usize, name: &str) -> f64 {
        let url = format!("{}/metrics", self.sims[i].base_url());
        let (_, text) = self.call("GET", &url, None).await;
        (text.lines())
            .filter(|l| l.starts_with(&format!("{name}{{")) && !l.contains("abort"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Requests each engine has served.
    async fn served(&self) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..self.sims.len() {
            out.push(self.counter(i, "vllm:request_success_total").await);
        }
        out
    }
}

/// The gateway on the test's runtime: pingora's proxy app (`http_proxy`) behind a plain accept
/// loop, so the test knows the ephemeral port (the binary uses pingora's `Server`).
async fn serve(gateway: Gateway, listener: TcpListener, mut shutdown: ShutdownWatch) {
    let app = Arc::new(pingora::proxy::http_proxy(&Arc::default(), gateway));
    let mut conns = JoinSet::new();
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => r.unwrap(),
            _ = shutdown.changed() => return,
        };
        while conns.try_join_next().is_some() {}
        let stream = Box::new(pingora::protocols::l4::stream::Stream::from(tcp));
        conns.spawn(Service::handle_event(
            stream,
            Arc::clone(&app),
            shutdown.clone(),
        ));
    }
}

fn example_config() -> Config {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.yaml");
    Config::from_yaml(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A long document (about 1,500 tokens) that differs per `topic`.
fn document(topic: &str) -> String {
    (0..120)
        .map(|i| {
            format!(
                "Section {i} of the {topic} handbook: rule {} applies. ",
                i * 7 % 13
            )
        })
        .collect()
}

fn deltas(before: &[f64], after: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// The example configuration file loads and builds a gateway with both cache-aware plugins.
#[test]
fn example_config_builds() {
    let config = example_config();
    assert_eq!(config.listen, "127.0.0.1:8080");
    assert_eq!(config.engines.len(), 3);
    let names: Vec<&str> = (config.scheduler.plugins.score.enabled.iter())
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["least-request", "prefix-cache", "kvcache-aware"]);
    let gateway = Gateway::new(&config).unwrap();
    assert!(gateway.scheduler().kv_index().is_some());
}

/// `prefix-cache`: each of three long prefixes, sent 10 times with different questions, is
/// served by one engine at least 9 times, and that engine reports prefix-cache hits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_prefix_goes_back_to_its_engine() {
    let s = Setup::start(
        "plugins: {Score: {enabled: [{name: least-request, weight: 1}, {name: prefix-cache, weight: 1}]}}",
        false,
    )
    .await;
    for topic in ["bicycle", "flower", "garden"] {
        let doc = document(topic);
        let before = s.served().await;
        for q in 0..10 {
            let prompt = format!("{doc}\nQuestion {q}: what does rule {q} say?");
            let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 2});
            s.post("/v1/completions", &body).await;
        }
        let d = deltas(&before, &s.served().await);
        assert_eq!(d.iter().sum::<f64>(), 10.0, "{topic}: {d:?}");
        let (holder, n) = (d.iter().enumerate())
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap();
        assert!(*n >= 9.0, "{topic}: spread over the engines as {d:?}");
        let hits = s.counter(holder, "vllm:prefix_cache_hits_total").await;
        assert!(
            hits > 0.0,
            "{topic}: engine {holder} reports no prefix-cache hit"
        );
    }
    let (status, text) = s.call("GET", &format!("{}/v1/models", s.url), None).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(MODEL), "{text}");
}
/// `kvcache-aware` fed by KV events only: a long chat prefix computed by one engine directly
/// (the gateway never routed it) draws at least 9 of 10 later gateway requests to that engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_events_draw_the_prefix_to_the_engine_holding_it() {
    let s = Setup::start(
        "plugins: {Score: {enabled: [{name: least-request, weight: 1}, {name: kvcache-aware, weight: 1}]}}",
        true,
    )
    .await;
    let kv = s.kv.clone().unwrap();
    for _ in 0..250 {
        if kv.subscribed() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(kv.subscribed(), 3);
    // Give the publishers a moment to register the subscriptions (ZMQ slow joiner).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let index = s.scheduler.kv_index().unwrap().clone();
    let chat = |doc: &str, q: &str| {
        json!({"model": MODEL, "max_tokens": 2, "messages": [
            {"role": "system", "content": doc}, {"role": "user", "content": q}]})
    };
    for (engine, topic) in [(2, "bicycle"), (1, "flower")] {
        let doc = document(topic);
        let url = format!("{}/v1/chat/completions", s.sims[engine].base_url());
        let held = index.len();
        let (status, text) = s.call("POST", &url, Some(&chat(&doc, "Hello?"))).await;
        assert_eq!(status, 200, "{text}");
        let tokens = serde_json::from_str::<Value>(&text).unwrap()["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap() as usize;
        for _ in 0..250 {
            if index.len() >= held + tokens / 16 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            index.len() >= held + tokens / 16,
            "{topic}: {} entries",
            index.len()
        );

        let before = s.served().await;
        for q in 0..10 {
            let body = chat(&doc, &format!("Question {q}: what does rule {q} say?"));
            s.post("/v1/chat/completions", &body).await;
        }
        let d = deltas(&before, &s.served().await);
        assert!(
            d[engine] >= 9.0,
            "{topic}: engine {engine} holds it, served {d:?}"
        );
    }
}
