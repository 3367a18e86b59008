//! Cluster mode with Go Kthena's Redis state on the real API server and a real
//! `redis-server` (database 10, which no other test uses): the Redis index ignores owners
//! written before a pod's container started, and the garbage collection deletes a deleted
//! pod's block fields and in-flight field within one interval.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kthena_openai::Message;
use kthena_router::Router;
use kthena_router::kv::{block_key, kthena_block_hash};
use kthena_router::tokenize::ModelTokenizer;
use kthena_router::upstream::ON_FLIGHT_KEY;
use kthena_testenv::TestNamespace;
use kube::Api;
use tokio::time::Instant;

use crate::cluster_support::{ClusterRouter, Node, apply, model_route, model_server};
use crate::kv_support::{metric_in, post_json, qwen3_dir};

const DB10: &str = "redis://127.0.0.1:6379/10";
const GC_INTERVAL: Duration = Duration::from_secs(1);

fn redis() -> redis::Connection {
    redis::Client::open(DB10)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("redis-server must listen on 127.0.0.1:6379 (scripts/services.sh starts it)")
}

/// A cluster-mode router scoring with `kvcache-aware` over the Redis index of [`DB10`]
/// (GC every [`GC_INTERVAL`], no grace) and sharing in-flight counts there.
async fn start_router(ns: &TestNamespace, model: &str) -> ClusterRouter {
    let dir = tempfile::tempdir().unwrap();
    let tok = qwen3_dir();
    let text = format!(
        "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\n\
         metricsScrapeInterval: 100ms\n\
         accessLog: {{format: json, output: \"{}\"}}\n\
         scheduler:\n  plugins:\n    Filter: {{enabled: []}}\n    Score:\n      enabled:\n\
         \x20     - {{name: kvcache-aware, weight: 2}}\n      - {{name: least-request, weight: 1}}\n\
         kvCache:\n  index: redis\n\
         \x20 redis: {{url: \"{DB10}\", timeout: 1s, gcInterval: {}ms, gcGrace: 0s, gcScanKeys: 1000}}\n\
         \x20 tokenizers:\n  - {{model: {model}, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}\n",
        dir.path().join("access.log").display(),
        GC_INTERVAL.as_millis(),
        tok.join("tokenizer.json").display(),
        tok.join("tokenizer_config.json").display(),
    );
    let path = dir.path().join("router.yaml");
    std::fs::write(&path, &text).unwrap();
    let mut cfg = kthena_router::Config::from_yaml(&path, &text)
        .unwrap()
        .validate(&path)
        .unwrap();
    // What `REDIS_HOST` sets (database 0 there; ours here).
    cfg.on_flight_redis = Some(DB10.to_owned());
    let router = Router::start_in_cluster(cfg, ns.client().clone())
        .await
        .unwrap();
    ClusterRouter { dir, router }
}

/// Unix seconds of the start of Pod `name`'s running container, as the node reported it.
async fn container_started(ns: &TestNamespace, name: &str) -> i64 {
    let pods: Api<Pod> = ns.api();
    let pod = pods.get(name).await.unwrap();
    let statuses = pod.status.unwrap().container_statuses.unwrap();
    let running = statuses[0]
        .state
        .as_ref()
        .unwrap()
        .running
        .as_ref()
        .unwrap();
    running.started_at.as_ref().unwrap().0.as_second()
}

/// The request body and its prompt's token ids (the router's tokenizer).
fn prompt() -> (serde_json::Value, Vec<u32>) {
    let dir = qwen3_dir();
    let tok = ModelTokenizer::load(
        "qwen3",
        &dir.join("tokenizer.json"),
        Some(&dir.join("tokenizer_config.json")),
        0,
    )
    .unwrap();
    let system = "You answer questions about ferries. ".repeat(40);
    let messages = [("system", system.as_str()), ("user", "When?")];
    let text = tok
        .render_chat(&messages.map(|(role, content)| Message {
            role: role.into(),
            content: content.into(),
        }))
        .unwrap();
    let tokens = tok.encode_uncached(&text, false).unwrap();
    let body = serde_json::json!({"max_tokens": 2, "messages": messages
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))});
    (body, tokens)
}

/// Writes `owner` at Unix second `at` for the first `blocks` blocks, as the sidecar does.
fn write_owner(
    c: &mut redis::Connection,
    model: &str,
    tokens: &[u32],
    blocks: usize,
    owner: &str,
    at: i64,
) {
    for block in tokens.chunks(16).take(blocks) {
        let key = block_key(model, kthena_block_hash(block));
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg(owner)
            .arg(at)
            .query(c)
            .unwrap();
    }
}

/// The distinct keys of the first `blocks` blocks (Go Kthena's block hash is not chained:
/// blocks of the same tokens share a key).
fn distinct_keys(model: &str, tokens: &[u32], blocks: usize) -> usize {
    tokens
        .chunks(16)
        .take(blocks)
        .map(|b| block_key(model, kthena_block_hash(b)))
        .collect::<std::collections::HashSet<_>>()
        .len()
}

/// Block keys holding a field of `owner`, and the count of all block keys.
fn owned_keys(c: &mut redis::Connection, owner: &str) -> (usize, usize) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("matrix:kv:block:*")
        .query(c)
        .unwrap();
    let owned = keys
        .iter()
        .filter(|k| {
            redis::cmd("HEXISTS")
                .arg(k.as_str())
                .arg(owner)
                .query::<bool>(c)
                .unwrap()
        })
        .count();
    (owned, keys.len())
}

fn in_flight_has(c: &mut redis::Connection, field: &str) -> bool {
    redis::cmd("HEXISTS")
        .arg(ON_FLIGHT_KEY)
        .arg(field)
        .query(c)
        .unwrap()
}

/// Polls `pred` every 20 ms until it holds; panics after `limit`. Returns the time taken.
async fn wait_for(what: &str, limit: Duration, mut pred: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !pred() {
        assert!(t0.elapsed() < limit, "{what} not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

/// Two pods of one ModelServer on a simulated node and a ready router in front of them.
struct Scene {
    ns: TestNamespace,
    n: String,
    model: String,
    node: Node,
    r: ClusterRouter,
}

async fn scene() -> Scene {
    let ns = kthena_testenv::namespace("cluster-redis-gc").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-model");
    let node = Node::start(&ns);
    node.pod("pod-a", "sim", &model).await;
    node.pod("pod-b", "sim", &model).await;
    apply(
        &ns,
        &[model_server(&n, "ms", &model, "sim", node.port)],
        &[model_route(&n, "route", &model, "ms")],
    )
    .await;
    let r = start_router(&ns, &model).await;
    r.wait_ready().await;
    r.wait_endpoints(&n, "ms", &["pod-a", "pod-b"], Duration::from_secs(10))
        .await;
    Scene {
        ns,
        n,
        model,
        node,
        r,
    }
}

/// The prompt's keys in Redis: A's (every block, written 5 s before its container started)
/// and B's (all but the last block, written now); a ghost pod's in-flight count.
struct Seeded {
    body: serde_json::Value,
    total: usize,
    keys_a: usize,
    keys_b: usize,
    owner_a: String,
    owner_b: String,
}

async fn seed(s: &Scene, c: &mut redis::Connection) -> Seeded {
    let (mut body, tokens) = prompt();
    body["model"] = s.model.clone().into();
    let total = tokens.len().div_ceil(16);
    let (keys_a, keys_b) = (
        distinct_keys(&s.model, &tokens, total),
        distinct_keys(&s.model, &tokens, total - 1),
    );
    assert_eq!(keys_a, keys_b + 1, "the last block is the user's question");
    let (owner_a, owner_b) = (format!("pod-a.{}", s.n), format!("pod-b.{}", s.n));
    let started_a = container_started(&s.ns, "pod-a").await;
    let now = jiff::Timestamp::now().as_second();
    write_owner(c, &s.model, &tokens, total, &owner_a, started_a - 5);
    write_owner(c, &s.model, &tokens, total - 1, &owner_b, now);
    // A pod that never existed has an in-flight count (a router elsewhere, long ago).
    let _: () = redis::cmd("HSET")
        .arg(ON_FLIGHT_KEY)
        .arg(format!("{}/ghost", s.n))
        .arg(1)
        .query(c)
        .unwrap();
    Seeded {
        body,
        total,
        keys_a,
        keys_b,
        owner_a,
        owner_b,
    }
}

/// `/metrics` of the router.
async fn metrics(r: &ClusterRouter) -> String {
    crate::common::get(&format!("http://{}/metrics", r.router.metrics_addr))
        .await
        .1
}

/// Pod A holds every block of the prompt in Redis, written before its container started;
/// pod B all but the last, written after: every request goes to B, the match ratio is B's, and
/// the garbage collection deletes A's stale fields. Once B is deleted, its block fields and
/// its in-flight field are gone within one GC interval, emptied keys with them, and the
/// next request goes to A without error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_owners_are_ignored_and_a_deleted_pods_fields_go_within_one_gc_interval() {
    let mut c = redis();
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let s = scene().await;
    let seeded = seed(&s, &mut c).await;
    let url = format!("{}/v1/chat/completions", s.r.url());
    for _ in 0..4 {
        let (status, v) = post_json(&url, &seeded.body).await;
        assert_eq!(status, http::StatusCode::OK, "{v}");
    }
    let served: Vec<String> = s.r.served_by().into_iter().map(|(p, _)| p).collect();
    assert_eq!(served, vec!["pod-b"; 4]);
    let ratio = metric_in(
        &metrics(&s.r).await,
        &format!(
            "kthena_router_kvcache_aware_match_ratio_sum{{model=\"{}\"}}",
            s.model
        ),
    );
    let total = seeded.total as f64;
    let want = 4.0 * (total - 1.0) / total;
    assert!((ratio - want).abs() < 1e-9, "{ratio} != {want}");

    // A's stale fields and the ghost's count go; B's count of the requests stays.
    let Seeded {
        owner_a, owner_b, ..
    } = &seeded;
    wait_for("A's stale fields deleted", Duration::from_secs(10), || {
        owned_keys(&mut c, owner_a).0 == 0
    })
    .await;
    let ghost = format!("{}/ghost", s.n);
    wait_for(
        "the ghost's in-flight field deleted",
        Duration::from_secs(10),
        || !in_flight_has(&mut c, &ghost),
    )
    .await;
    // The last block's key held only A: it went with A's field.
    assert_eq!(owned_keys(&mut c, owner_b), (seeded.keys_b, seeded.keys_b));
    assert!(in_flight_has(&mut c, &format!("{}/pod-b", s.n)));
    deleted_pods_fields_go(&s, &seeded, &mut c).await;
    s.r.router.shutdown().await;
}

/// Deletes pod B: its fields go within one GC interval and requests go to A.
async fn deleted_pods_fields_go(s: &Scene, seeded: &Seeded, c: &mut redis::Connection) {
    s.node.delete("pod-b").await;
    let pods: Api<Pod> = s.ns.api();
    wait_for_pod_gone(&pods, "pod-b").await;
    let b_flight = format!("{}/pod-b", s.n);
    let took = wait_for("B's fields deleted", GC_INTERVAL * 3, || {
        owned_keys(c, &seeded.owner_b).0 == 0 && !in_flight_has(c, &b_flight)
    })
    .await;
    eprintln!("a deleted pod's Redis fields were gone {took:?} after the pod");
    assert!(
        took <= GC_INTERVAL + Duration::from_millis(500),
        "{took:?}: more than one GC interval ({GC_INTERVAL:?}) and the watch's delay"
    );
    assert_eq!(owned_keys(c, &seeded.owner_b), (0, 0));

    let url = format!("{}/v1/chat/completions", s.r.url());
    let (status, v) = post_json(&url, &seeded.body).await;
    assert_eq!(status, http::StatusCode::OK, "{v}");
    assert_eq!(s.r.served_by().last().unwrap().0, "pod-a");
    let text = metrics(&s.r).await;
    let m = |x: &str| metric_in(&text, &format!("kthena_router_redis_gc_{x}"));
    let (keys_a, keys_b) = (seeded.keys_a as f64, seeded.keys_b as f64);
    assert_eq!(
        m("fields_removed_total{hash=\"kv_block\",reason=\"restarted\"}"),
        keys_a
    );
    assert_eq!(
        m("fields_removed_total{hash=\"kv_block\",reason=\"deleted_pod\"}"),
        keys_b
    );
    assert_eq!(
        m("fields_removed_total{hash=\"in_flight\",reason=\"deleted_pod\"}"),
        2.0
    );
    assert_eq!(m("keys_removed_total{hash=\"kv_block\"}"), keys_a);
}

/// Waits until Pod `name` is gone from the API server (the node finished its deletion).
async fn wait_for_pod_gone(pods: &Api<Pod>, name: &str) {
    let t0 = Instant::now();
    while pods.get_opt(name).await.unwrap().is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{name} never went away"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
