//! LoRA-aware routing over real sockets: two kthena-sim replicas of one engine model behind
//! an aliased ModelRoute (`modelName: qwen`, engine model `Qwen/Qwen3-0.6B`), with an
//! adapter loaded on some replicas only.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use http::StatusCode;

const BASE: &str = "Qwen/Qwen3-0.6B";
const ADAPTER: &str = "sql-lora";

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(b)))
}

/// The aliased route: base model `qwen`, adapters `sql-lora` and `chat-lora`.
fn lora_route() -> String {
    "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: qwen, namespace: default}
spec:
  modelName: qwen
  loraAdapters: [sql-lora, chat-lora]
  rules:
  - targetModels: [{modelServerName: qwen-srv}]
"
    .to_owned()
}

/// A replica, with `adapters` loaded at start.
async fn replica(adapters: &[&str]) -> kthena_sim::SimHandle {
    let mut cfg = sim_config(BASE);
    cfg.lora_modules = adapters.iter().map(|a| (*a).to_owned()).collect();
    kthena_sim::spawn(cfg).await.unwrap()
}

/// A router over replicas `sim-a` and `sim-b` with `lora-affinity` on (the Go bug: it
/// rejected every endpoint for base requests to an alias) and least-request scores.
async fn router(a: &kthena_sim::SimHandle, b: &kthena_sim::SimHandle, scrape: &str) -> TestRouter {
    let head = format!(
        "metricsScrapeInterval: {scrape}
auth: {{allowUnauthenticatedAdmin: true}}
scheduler:
  plugins:
    Filter:
      enabled: [lora-affinity]
    Score:
      enabled:
      - {{name: least-request, weight: 1}}
"
    );
    let eps = format!(
        "{}{}",
        endpoint("sim-a", a.addr(), "qwen"),
        endpoint("sim-b", b.addr(), "qwen")
    );
    let r = TestRouter::start(
        &head,
        &eps,
        &[
            ("s.yaml", model_server("qwen-srv", BASE, "qwen", "")),
            ("r.yaml", lora_route()),
        ],
    )
    .await;
    r.wait_ready().await;
    r
}

/// Sends `n` sequential chats for `model`; returns (status, body) of each.
async fn chats(r: &TestRouter, model: &str, n: usize) -> Vec<(StatusCode, serde_json::Value)> {
    let mut out = Vec::new();
    for i in 0..n {
        let (status, _, body) = post(
            &format!("{}/v1/chat/completions", r.url()),
            chat(model, &format!("question {i}"), false, 2),
            &[],
        )
        .await;
        out.push((status, json(&body)));
    }
    out
}

/// `selected_pod` → count, and the `upstream_attempts` list, of the access-log lines for
/// `model` after the first `skip` lines.
fn landed(r: &TestRouter, model: &str, skip: usize) -> (HashMap<String, usize>, Vec<u64>) {
    let mut pods = HashMap::new();
    let mut attempts = Vec::new();
    for l in r.access_log().iter().skip(skip) {
        if l["model_name"] == model {
            *pods
                .entry(l["selected_pod"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
            attempts.push(l["upstream_attempts"].as_u64().unwrap_or(0));
        }
    }
    (pods, attempts)
}

/// The router's view of an endpoint's adapters (`/debug/config_dump/pods`).
async fn adapters_of(r: &TestRouter, pod: &str) -> Vec<String> {
    let (_, text) = get(&format!(
        "http://{}/debug/config_dump/pods",
        r.router.debug_addr
    ))
    .await;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let p = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == pod)
        .unwrap();
    serde_json::from_value(p["loraAdapters"].clone()).unwrap()
}

async fn sim_call(sim: &kthena_sim::SimHandle, path: &str, adapter: &str) -> StatusCode {
    let body =
        serde_json::json!({"lora_name": adapter, "lora_path": format!("/adapters/{adapter}")});
    post(&format!("{}{path}", sim.base_url()), body.to_string(), &[])
        .await
        .0
}

/// An adapter on one replica of two: every adapter request lands there (with the
/// adapter's name sent upstream), every base request is served by both; an adapter on no
/// replica is a 503 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adapter_requests_land_on_the_replica_with_the_adapter() {
    let a = replica(&[ADAPTER]).await;
    let b = replica(&[]).await;
    let r = router(&a, &b, "100ms").await;
    assert_eq!(adapters_of(&r, "sim-a").await, vec![ADAPTER.to_owned()]);
    assert!(adapters_of(&r, "sim-b").await.is_empty());

    for (status, v) in chats(&r, ADAPTER, 20).await {
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["model"], ADAPTER);
    }
    let (pods, attempts) = landed(&r, ADAPTER, 0);
    assert_eq!(pods, HashMap::from([("sim-a".to_owned(), 20)]));
    assert!(attempts.iter().all(|n| *n == 1), "{attempts:?}");

    for (status, v) in chats(&r, "qwen", 20).await {
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["model"], BASE);
    }
    let (pods, _) = landed(&r, "qwen", 0);
    assert_eq!(pods.values().sum::<usize>(), 20);
    assert!(pods["sim-a"] > 0 && pods["sim-b"] > 0, "{pods:?}");

    // `chat-lora` is in the route but on no replica.
    let (status, v) = chats(&r, "chat-lora", 1).await.remove(0);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"]["code"], "lora_adapter_not_loaded");
    assert_eq!(v["error"]["param"], "model");
    assert_eq!(
        v["error"]["message"],
        "LoRA adapter `chat-lora` is not loaded on any endpoint of model server default/qwen-srv"
    );
    // One access-log line, no upstream attempt.
    assert_eq!(
        landed(&r, "chat-lora", 0),
        (HashMap::from([(String::new(), 1)]), vec![0])
    );
}

/// An adapter unloaded on the engine at run time stops receiving traffic after the next
/// refresh of the model lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloaded_adapter_stops_receiving_traffic_after_the_refresh() {
    let a = replica(&[ADAPTER]).await;
    let b = replica(&[ADAPTER]).await;
    let r = router(&a, &b, "100ms").await;
    for (status, v) in chats(&r, ADAPTER, 10).await {
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let (pods, _) = landed(&r, ADAPTER, 0);
    assert!(pods["sim-a"] > 0 && pods["sim-b"] > 0, "{pods:?}");

    assert_eq!(
        sim_call(&b, "/v1/unload_lora_adapter", ADAPTER).await,
        StatusCode::OK
    );
    let mut refreshed = false;
    for _ in 0..100 {
        if adapters_of(&r, "sim-b").await.is_empty() {
            refreshed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refreshed, "the scrape never dropped the adapter of sim-b");
    let skip = r.access_log().len();
    for (status, v) in chats(&r, ADAPTER, 10).await {
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let (pods, attempts) = landed(&r, ADAPTER, skip);
    assert_eq!(pods, HashMap::from([("sim-a".to_owned(), 10)]));
    assert!(attempts.iter().all(|n| *n == 1), "{attempts:?}");
}

/// Load/unload calls through the router update its view at once (no scrape in between:
/// the interval is an hour), and an engine's 404 "does not exist" for an adapter the router
/// believed loaded is retried on a replica that has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_unload_through_the_router_and_404_retry() {
    let a = replica(&[]).await;
    let b = replica(&[]).await;
    let r = router(&a, &b, "1h").await;
    let admin = |path: &'static str, pod: Option<&'static str>| {
        let url = format!("{}{path}", r.url());
        async move {
            let body = serde_json::json!({"lora_name": ADAPTER, "lora_path": "/adapters/sql"});
            let headers: Vec<(&str, &str)> = pod
                .map(|p| vec![("x-kthena-endpoint", p)])
                .unwrap_or_default();
            let (status, _, body) = post(&url, body.to_string(), &headers).await;
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let (status, v) = chats(&r, ADAPTER, 1).await.remove(0);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");

    let (status, text) = admin("/v1/load_lora_adapter", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("x-kthena-endpoint"), "{text}");
    let (status, text) = admin("/v1/load_lora_adapter", Some("sim-x")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");

    let (status, text) = admin("/v1/load_lora_adapter", Some("sim-a")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        text,
        format!("Success: LoRA adapter '{ADAPTER}' added successfully.")
    );
    let skip = r.access_log().len();
    for (status, v) in chats(&r, ADAPTER, 6).await {
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    assert_eq!(
        landed(&r, ADAPTER, skip).0,
        HashMap::from([("sim-a".to_owned(), 6)])
    );

    // Loaded on sim-b through the router (namespace/name form), then unloaded behind the
    // router's back: the engine's 404 sends each request on to sim-a.
    let (status, text) = admin("/v1/load_lora_adapter", Some("default/sim-b")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(adapters_of(&r, "sim-b").await, vec![ADAPTER.to_owned()]);
    assert_eq!(
        sim_call(&b, "/v1/unload_lora_adapter", ADAPTER).await,
        StatusCode::OK
    );
    let skip = r.access_log().len();
    for (status, v) in chats(&r, ADAPTER, 6).await {
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["model"], ADAPTER);
    }
    let (pods, mut attempts) = landed(&r, ADAPTER, skip);
    assert_eq!(pods, HashMap::from([("sim-a".to_owned(), 6)]));
    attempts.sort_unstable();
    assert_eq!(attempts, vec![1, 1, 1, 1, 1, 2]);
    assert!(adapters_of(&r, "sim-b").await.is_empty());

    // Unloaded through the router: the next request has nowhere to go.
    let (status, text) = admin("/v1/unload_lora_adapter", Some("sim-a")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, v) = chats(&r, ADAPTER, 1).await.remove(0);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains(ADAPTER));
    // The base model is still served by both.
    for (status, v) in chats(&r, "qwen", 4).await {
        assert_eq!(status, StatusCode::OK, "{v}");
    }
}

/// Go's behaviour stays available as `lora-affinity-by-name`: it compares the requested
/// name, so a base request to the alias `qwen` finds no endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_lora_affinity_by_name_compares_the_requested_name() {
    let a = replica(&[ADAPTER]).await;
    let head = "metricsScrapeInterval: 100ms
scheduler:
  plugins:
    Filter:
      enabled: [lora-affinity-by-name]
    Score:
      enabled:
      - {name: least-request, weight: 1}
";
    let r = TestRouter::start(
        head,
        &endpoint("sim-a", a.addr(), "qwen"),
        &[
            ("s.yaml", model_server("qwen-srv", BASE, "qwen", "")),
            ("r.yaml", lora_route()),
        ],
    )
    .await;
    r.wait_ready().await;
    let (status, v) = chats(&r, ADAPTER, 1).await.remove(0);
    assert_eq!(status, StatusCode::OK, "{v}");
    let (status, v) = chats(&r, "qwen", 1).await.remove(0);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("lora-affinity-by-name"),
        "{v}"
    );
}
