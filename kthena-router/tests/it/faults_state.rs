//! Fault matrix, the router's own dependencies and state: Redis (the KV index backend) down
//! and restarted, a KV-event publisher restarted with its sequence reset, and a config file
//! rewritten while requests run. The matrix is documented in docs/reliability.md.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{self, TestRouter, chat, post};
use crate::faults_support::*;
use crate::kv_support::{KvRouter, manifests, metric_in, post_json, qwen3_dir};
use bytes::Bytes;
use http::StatusCode;
use kthena_openai::Message;
use kthena_router::kv::{block_key, kthena_block_hash};
use kthena_router::tokenize::ModelTokenizer;
use rmpv::Value;
use zeromq::{Socket, SocketSend, ZmqMessage};

/// A `redis-server` of this test alone, on a free port, without persistence.
struct OwnRedis {
    port: u16,
    child: tokio::process::Child,
}

impl OwnRedis {
    async fn start(port: u16) -> Self {
        let child = tokio::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server must be installed (scripts/services.sh)");
        let url = format!("redis://127.0.0.1:{port}");
        for _ in 0..250 {
            if let Ok(mut c) = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection_with_timeout(Duration::from_millis(200))
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return Self { port, child };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("redis-server on port {port} never answered");
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

/// Writes `owner` for the first `blocks` blocks of `tokens`, as Go Kthena's sidecar does.
fn write_owner(conn: &mut redis::Connection, model: &str, tokens: &[u32], blocks: usize) {
    for block in tokens.chunks(16).take(blocks) {
        let key = block_key(model, kthena_block_hash(block));
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg("sim-1.default")
            .arg(1_800_000_000)
            .query(conn)
            .unwrap();
    }
}

/// Redis stops: requests are still served (every candidate scores 0 there, the error is
/// counted); Redis comes back on the same port: the index routes by prefix again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_and_restarted() {
    let port = closed_port().port();
    let redis_srv = OwnRedis::start(port).await;
    let mut sims = Vec::new();
    for _ in 0..2 {
        sims.push(
            kthena_sim::spawn(common::sim_config("qwen3"))
                .await
                .unwrap(),
        );
    }
    let dir = qwen3_dir();
    let config = format!(
        "metricsScrapeInterval: 1h
scheduler:
  plugins:
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 2}}
      - {{name: least-request, weight: 1}}
kvCache:
  index: redis
  redis: {{url: \"redis://127.0.0.1:{port}\", timeout: 500ms}}
  tokenizers:
  - {{model: qwen3, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: sim-0, address: \"{}\", labels: {{app: s}}}}
  - {{name: sim-1, address: \"{}\", labels: {{app: s}}}}
",
        dir.join("tokenizer.json").display(),
        dir.join("tokenizer_config.json").display(),
        sims[0].addr(),
        sims[1].addr()
    );
    let r = KvRouter::start(&config, &manifests("qwen3", "s")).await;
    r.wait_ready().await;
    let system = "You answer questions about trains. ".repeat(40);
    let tok = ModelTokenizer::load(
        "qwen3",
        &dir.join("tokenizer.json"),
        Some(&dir.join("tokenizer_config.json")),
        0,
    )
    .unwrap();
    let msgs = [("system", system.as_str()), ("user", "When?")].map(|(role, content)| Message {
        role: role.into(),
        content: content.into(),
    });
    let tokens = tok
        .encode_uncached(&tok.render_chat(&msgs).unwrap(), false)
        .unwrap();
    let blocks = tokens.len().div_ceil(16) - 1;
    let body = serde_json::json!({"model": "public", "max_tokens": 2,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "When?"}]});
    let url = format!("{}/v1/chat/completions", r.url());
    let errors = r#"kthena_router_kvcache_aware_errors_total{model="public",stage="redis"}"#;

    write_owner(&mut redis_srv.conn(), "public", &tokens, blocks);
    let (status, v) = post_json(&url, &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(r.access_log().last().unwrap()["selected_pod"], "sim-1");
    assert_eq!(r.metric(errors).await, 0.0);

    redis_srv.kill().await;
    for _ in 0..3 {
        let (status, v) = post_json(&url, &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let text = r.metrics().await;
    let kv_lines: Vec<&str> = text.lines().filter(|l| l.contains("kvcache")).collect();
    assert!(metric_in(&text, errors) >= 3.0, "{kv_lines:?}");
    assert_router_idle(&r.router).await;

    let redis_srv = OwnRedis::start(port).await;
    write_owner(&mut redis_srv.conn(), "public", &tokens, blocks);
    let before = r.metric(errors).await;
    let (status, v) = post_json(&url, &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(r.access_log().last().unwrap()["selected_pod"], "sim-1");
    assert_eq!(r.metric(errors).await, before);
    assert_router_idle(&r.router).await;
    redis_srv.kill().await;
    for s in sims {
        s.kill().await;
    }
    r.router.shutdown().await;
}

/// A vLLM `BlockStored` event of `blocks` 16-token blocks from block `first`.
fn stored(first: u32, blocks: u32) -> Value {
    let map = |k: &str, v: Value| (Value::from(k), v);
    Value::Map(vec![
        map("type", Value::from("BlockStored")),
        map(
            "block_hashes",
            Value::Array((0..blocks).map(|i| Value::from(first + i + 1000)).collect()),
        ),
        map("parent_block_hash", Value::Nil),
        map(
            "token_ids",
            Value::Array(
                (first * 16..(first + blocks) * 16)
                    .map(Value::from)
                    .collect(),
            ),
        ),
        map("block_size", Value::from(16)),
    ])
}

fn kv_message(seq: u64, events: Vec<Value>) -> ZmqMessage {
    let mut payload = Vec::new();
    rmpv::encode::write_value(
        &mut payload,
        &Value::Array(vec![Value::F64(1.0), Value::Array(events), Value::from(0)]),
    )
    .unwrap();
    let mut m = ZmqMessage::from(Bytes::from_static(b"kv@127.0.0.1@m"));
    m.push_back(Bytes::copy_from_slice(&seq.to_be_bytes()));
    m.push_back(Bytes::from(payload));
    m
}

/// Sends `seq` until `series` reaches `want` (the subscription may not be live yet).
async fn send_until(
    publisher: &mut zeromq::PubSocket,
    r: &KvRouter,
    seq: u64,
    events: &[Value],
    series: &str,
    want: f64,
) {
    for _ in 0..200 {
        publisher
            .send(kv_message(seq, events.to_vec()))
            .await
            .unwrap();
        if r.metric(series).await >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{series} never reached {want}");
}

/// The engine's KV-event publisher restarts on the same port and counts from 0 again: the
/// router sees the sequence go back (a rollback), drops what the old publisher had stored
/// and keeps the new events; requests are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_event_publisher_restarted_with_sequence_reset() {
    let sim = kthena_sim::spawn(common::sim_config("m")).await.unwrap();
    let mut publisher = zeromq::PubSocket::new();
    let port = match publisher.bind("tcp://127.0.0.1:0").await.unwrap() {
        zeromq::Endpoint::Tcp(_, p) => p,
        other => panic!("unexpected endpoint {other:?}"),
    };
    let config = format!(
        "metricsScrapeInterval: 1h
scheduler:
  plugins:
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 1}}
kvCache: {{remoteTokenize: false}}
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: pub, address: \"{}\", labels: {{app: a}}, kvEvents: \"tcp://127.0.0.1:{port}\"}}
",
        sim.addr()
    );
    let r = KvRouter::start(&config, &manifests("m", "a")).await;
    let total = r#"kthena_router_kv_events_total{endpoint="default/pub",type="BlockStored"}"#;
    send_until(&mut publisher, &r, 0, &[stored(0, 3)], total, 1.0).await;
    publisher
        .send(kv_message(1, vec![stored(3, 2)]))
        .await
        .unwrap();
    r.wait_metric(total, Duration::from_secs(5), |v| v >= 2.0)
        .await;
    assert_eq!(r.metric("kthena_router_kv_index_entries").await, 5.0);

    publisher.close().await;
    // The restarted publisher binds the same port (retried while the old socket closes).
    let mut publisher = zeromq::PubSocket::new();
    let mut bound = false;
    for _ in 0..100 {
        if publisher
            .bind(&format!("tcp://127.0.0.1:{port}"))
            .await
            .is_ok()
        {
            bound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(bound, "port {port} never came free");
    let rollbacks = r#"kthena_router_kv_events_rollbacks_total{endpoint="default/pub"}"#;
    send_until(&mut publisher, &r, 0, &[stored(50, 1)], rollbacks, 1.0).await;
    let text = r.metrics().await;
    assert_eq!(metric_in(&text, rollbacks), 1.0);
    assert_eq!(metric_in(&text, "kthena_router_kv_index_entries"), 1.0);
    assert_eq!(r.router.snapshot().scheduler.kv_index().unwrap().len(), 1);
    let body = serde_json::json!({"model": "public", "prompt": "p", "max_tokens": 2});
    let (status, v) = post_json(&format!("{}/v1/completions", r.url()), &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_router_idle(&r.router).await;
    sim.kill().await;
    r.router.shutdown().await;
}

/// `router.yaml` (standalone) as [`TestRouter::start`] writes it, with these endpoints.
fn standalone_config(r: &TestRouter, endpoints: &str) -> String {
    format!(
        "metricsScrapeInterval: 1h\naccessLog: {{format: json, output: \"{}\"}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{endpoints}",
        r.dir.path().join("access.log").display()
    )
}

/// The config file is rewritten (endpoints added, swapped, removed) while four clients send
/// streaming and plain requests: every request succeeds and every stream ends with
/// `[DONE]`; no counter is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_reload_during_traffic() {
    let a = kthena_sim::spawn(common::sim_config("m")).await.unwrap();
    let b = kthena_sim::spawn(common::sim_config("m")).await.unwrap();
    let ep_a = common::endpoint("a", a.addr(), "x");
    let ep_b = common::endpoint("b", b.addr(), "x");
    let r = fault_router("", a.addr(), "").await;
    let url = format!("{}/v1/chat/completions", r.url());
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..4 {
        let url = url.clone();
        let stop = Arc::clone(&stop);
        clients.spawn(async move {
            let mut i = 0;
            while i < 5 || !stop.load(Ordering::SeqCst) {
                let stream = (c + i) % 2 == 0;
                let (status, _, body) = post(&url, chat("m", "hello", stream, 8), &[]).await;
                let text = String::from_utf8_lossy(&body).into_owned();
                assert_eq!(status, StatusCode::OK, "client {c} request {i}: {text}");
                if stream {
                    assert!(
                        text.ends_with("data: [DONE]\n\n"),
                        "client {c} request {i}: {text}"
                    );
                } else {
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                    assert!(v["choices"][0]["message"]["content"].is_string(), "{text}");
                }
                i += 1;
            }
            i
        });
    }
    let path = r.dir.path().join("router.yaml");
    let mut generation = r.router.generation();
    let steps = [
        format!("{ep_a}{ep_b}"),
        ep_b.clone(),
        format!("{ep_b}{ep_a}"),
        ep_a.clone(),
    ];
    for eps in steps.iter().cycle().take(8) {
        std::fs::write(&path, standalone_config(&r, eps)).unwrap();
        generation += 1;
        for _ in 0..250 {
            if r.router.generation() >= generation {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let failed = r
            .metric(r#"kthena_router_config_reloads_total{result="failure"}"#)
            .await;
        assert!(
            r.router.generation() >= generation,
            "no reload to {generation} ({failed} failed): {eps}"
        );
        generation = r.router.generation();
    }
    stop.store(true, Ordering::SeqCst);
    let mut sent = 0;
    for n in clients.join_all().await {
        sent += n;
    }
    let reloads = r#"kthena_router_config_reloads_total{result="success"}"#;
    assert!(r.metric(reloads).await >= 8.0);
    assert_eq!(
        r.metric(r#"kthena_router_config_reloads_total{result="failure"}"#)
            .await,
        0.0
    );
    assert_eq!(r.access_log().len(), sent);
    assert_counters_zero(&r).await;
    a.kill().await;
    b.kill().await;
    r.router.shutdown().await;
}
