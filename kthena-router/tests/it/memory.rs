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
