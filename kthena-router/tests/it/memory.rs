//! The router on an in-memory network (`Router::start_in_memory`) in front of an in-memory
//! engine, on a paused clock.

#![allow(clippy::unwrap_used, reason = "tests")]

use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kthena_memnet::{Connector, MemNet};

fn load(dir: &std::path::Path, head: &str, endpoints: &str) -> kthena_router::Config {
    let mdir = dir.join("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(mdir.join("s.yaml"), model_server("srv", "m", "demo", "")).unwrap();
    std::fs::write(mdir.join("r.yaml"), simple_route("route", "public", "srv")).unwrap();
    let path = dir.join("router.yaml");
    std::fs::write(
        &path,
        format!(
            "{head}\nbindAddress: 127.0.0.1\naccessLog: {{enabled: false}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{endpoints}"
        ),
    )
    .unwrap();
    let ov = kthena_router::Overrides {
        port: Some(0),
        metrics_port: Some(0),
        debug_port: Some(0),
        ..Default::default()
    };
    kthena_router::load_config(&path, &std::collections::HashMap::new(), ov).unwrap()
}

/// A chat completion through the router over in-memory connections: the model is rewritten
/// for the engine, the answer has the engine's usage, and the router's `/metrics` (on the
/// same network) counts exactly one request.
#[tokio::test(start_paused = true)]
async fn a_chat_goes_through_the_router_on_the_in_memory_network() {
    let net = MemNet::new();
    let sim = kthena_sim::spawn_in_memory(sim_config("m").with_time_scale(1.0), &net)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = load(
        dir.path(),
        LEAST_REQUEST_ONLY,
        &endpoint("sim-a", sim.addr(), "demo"),
    );
    let router = kthena_router::Router::start_in_memory(cfg, net.clone())
        .await
        .unwrap();
    let client: Client<Connector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(Connector::memory(net.clone()));
    let body = serde_json::json!({"model": "public", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3});
    let req = http::Request::post(format!("http://{}/v1/chat/completions", router.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["model"], "m");
    assert_eq!(v["usage"]["completion_tokens"], 3);

    let metrics = client
        .get(
            format!("http://{}/metrics", router.metrics_addr)
                .parse()
                .unwrap(),
        )
        .await
        .unwrap();
    let text = String::from_utf8(
        metrics
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("kthena_router_requests_total{") && l.contains("status_code=\"200\"")
        })
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with(" 1"), "{line}");
    assert!(net.is_listening(router.addr));
    router.shutdown().await;
    sim.kill().await;
}

/// Settings that need real sockets are refused with a message naming them.
#[tokio::test]
async fn settings_that_need_real_sockets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = load(
        dir.path(),
        "kvCache: {index: redis}",
        &endpoint("sim-a", "127.0.0.1:1".parse().unwrap(), "demo"),
    );
    let err = kthena_router::Router::start_in_memory(cfg, MemNet::new())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the in-memory network cannot run `kvCache.index: redis`"),
        "{err}"
    );
}

/// Sum of every series of the metric `name` in an engine's `/metrics`.
async fn engine_metric(client: &Client<Connector, Full<Bytes>>, base: &str, name: &str) -> f64 {
    let resp = client
        .get(format!("{base}/metrics").parse().unwrap())
        .await
        .unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Two routers in front of two engines: router A holds a long stream on one engine, then
/// router B sends a short request. Returns, per engine, (running, finished) once B's answer
/// is complete.
async fn two_routers(board: Option<kthena_router::upstream::InFlightBoard>) -> [(f64, f64); 2] {
    let net = MemNet::new();
    let mut sims = Vec::new();
    let mut endpoints = String::new();
    for name in ["sim-a", "sim-b"] {
        let sim = kthena_sim::spawn_in_memory(sim_config("m").with_time_scale(1.0), &net)
            .await
            .unwrap();
        endpoints.push_str(&endpoint(name, sim.addr(), "demo"));
        sims.push(sim);
    }
    let client: Client<Connector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(Connector::memory(net.clone()));
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut routers = Vec::new();
    for dir in [&da, &db] {
        let cfg = load(dir.path(), LEAST_REQUEST_ONLY, &endpoints);
        let r = kthena_router::Router::start_in_memory_with(cfg, net.clone(), board.clone());
        routers.push(r.await.unwrap());
    }
    let send = |router: &kthena_router::Router, max_tokens: u32, stream: bool| {
        let body = serde_json::json!({"model": "public", "prompt": "hello there", "max_tokens": max_tokens, "stream": stream});
        let req = http::Request::post(format!("http://{}/v1/completions", router.addr))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        client.request(req)
    };
    // A's stream (2,000 tokens, seconds of decoding) is open while B schedules.
    let held = send(&routers[0], 2000, true).await.unwrap();
    assert_eq!(held.status(), 200);
    let short = send(&routers[1], 1, false).await.unwrap();
    assert_eq!(short.status(), 200);
    short.into_body().collect().await.unwrap();
    let mut out = [(0.0, 0.0); 2];
    for (o, sim) in out.iter_mut().zip(&sims) {
        let base = sim.base_url();
        *o = (
            engine_metric(&client, &base, "vllm:num_requests_running").await,
            engine_metric(&client, &base, "vllm:request_success_total").await,
        );
    }
    drop(held);
    for r in routers {
        r.shutdown().await;
    }
    for s in sims {
        s.kill().await;
    }
    out
}

/// Routers started with the same in-flight board see each other's requests: B sends its
/// request to the engine A is not using. Without a board, B sees both engines idle and
/// picks the one A picked (the same tie-break).
#[tokio::test(start_paused = true)]
async fn routers_sharing_an_in_flight_board_spread_their_requests() {
    let board = kthena_router::upstream::InFlightBoard::default();
    assert_eq!(two_routers(Some(board)).await, [(1.0, 0.0), (0.0, 1.0)]);
    assert_eq!(two_routers(None).await, [(1.0, 1.0), (0.0, 0.0)]);
}
