//! An engine on the in-memory network (`spawn_in_memory`) on a paused clock: HTTP over
//! in-memory connections, KV events on the network's topic, model time = virtual time.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kthena_memnet::{Connector, MemNet};
use kthena_sim::{Config, spawn_in_memory};

fn client(net: &MemNet) -> Client<Connector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(Connector::memory(net.clone()))
}

/// A 32-token prompt generating 4 tokens costs, in the default profile, one prefill step
/// (5 ms + 32 × 0.03 ms) and three decode steps (6 ms + 0.05 ms each): on the paused clock
/// the answer comes exactly that much later, and the engine's KV events (two stored
/// blocks of 16 tokens) arrive on the topic its `kvEvents` address names.
#[tokio::test(start_paused = true)]
async fn an_in_memory_engine_answers_on_the_virtual_clock_and_publishes_kv_events() {
    let net = MemNet::new();
    let mut cfg = Config::default()
        .with_ephemeral_port()
        .with_model("m")
        .with_time_scale(1.0)
        .with_hash_seed("0");
    cfg.kv_events_port = Some(0);
    let sim = spawn_in_memory(cfg, &net).await.unwrap();
    let port = sim.kv_events_port().unwrap();
    let mut events = net.subscribe(&format!("tcp://{}:{port}", sim.addr().ip()));
    assert!(net.is_listening(sim.addr()));

    let start = tokio::time::Instant::now();
    let body = serde_json::json!({"model": "m", "prompt": (1..=32).collect::<Vec<u32>>(), "max_tokens": 4});
    let req = http::Request::post(format!("{}/v1/completions", sim.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client(&net).request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 4);
    let took = start.elapsed();
    // The prefill step (5.96 ms) gives the first token, three decode steps (6.05 ms each)
    // the others: 24.11 ms, which tokio's 1 ms timer wheel rounds up to 25 ms.
    assert_eq!(took, Duration::from_millis(25));

    let frames = tokio::time::timeout(Duration::from_secs(1), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frames.len(), 3, "topic, sequence number, payload");
    assert_eq!(frames[0], Bytes::from("kv@127.0.0.1@m"));
    assert_eq!(frames[1], Bytes::copy_from_slice(&0u64.to_be_bytes()));
    let batch = rmpv::decode::read_value(&mut &frames[2][..]).unwrap();
    let stored = &batch.as_array().unwrap()[1].as_array().unwrap()[0];
    let field = |k: &str| {
        stored
            .as_map()
            .unwrap()
            .iter()
            .find(|(key, _)| key.as_str() == Some(k))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(field("type").as_str(), Some("BlockStored"));
    assert_eq!(field("block_size").as_u64(), Some(16));
    // With a fixed hash seed the block hashes are the same in every run.
    let hashes: Vec<u64> = field("block_hashes")
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_u64().unwrap())
        .collect();
    assert_eq!(
        hashes,
        [7_536_218_907_325_174_565, 9_048_537_298_590_080_561]
    );

    // A killed engine frees its address on the network.
    let addr = sim.addr();
    sim.kill().await;
    assert!(!net.is_listening(addr));
}
