//! vLLM's KV-event replay against kthena-sim's replay socket: the wire protocol with a raw
//! DEALER socket, the buffer's bound, the in-memory network's replay, and a router that
//! starts after an engine cached a long prompt.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use kthena_router::kv::replay;
use kthena_router::tokenize::ModelTokenizer;
use kthena_sim::KvEventsFormat;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::kv_routing::{Ctx, MODEL, config, direct_chat, sim_config, system_prompt};
use crate::kv_support::*;

/// A simulator with a publisher, a replay socket of `buffer` batches and the fallback
/// tokenizer.
fn replaying_sim(buffer: usize) -> kthena_sim::Config {
    let mut c = kthena_sim::Config::default()
        .with_ephemeral_port()
        .with_model("m")
        .with_time_scale(100.0);
    c.kv_events_port = Some(0);
    c.kv_events_replay_port = Some(0);
    c.kv_events_buffer_steps = buffer;
    c
}

/// Sends `n` completions with distinct prompts of about 100 tokens (each stores blocks).
async fn completions(sim: &kthena_sim::SimHandle, n: u32) {
    for i in 0..n {
        let prompt = format!("request {i} ").repeat(40);
        let body = serde_json::json!({"model": "m", "prompt": prompt, "max_tokens": 2});
        let (status, v) = post_json(&format!("{}/v1/completions", sim.base_url()), &body).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
}

/// A SUB socket on the simulator's publisher, connected and subscribed to every topic.
async fn subscriber(sim: &kthena_sim::SimHandle) -> zeromq::SubSocket {
    let mut sub = zeromq::SubSocket::new();
    let port = sim.kv_events_port().unwrap();
    sub.connect(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap();
    sub.subscribe("").await.unwrap();
    // ZMQ's slow joiner: let the publisher register the subscription.
    tokio::time::sleep(Duration::from_millis(200)).await;
    sub
}

/// Every `(seq, payload)` the subscriber receives until 300 ms pass without a message.
async fn drain(sub: &mut zeromq::SubSocket) -> Vec<(u64, Bytes)> {
    let mut out = Vec::new();
    while let Ok(msg) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
        let frames = msg.unwrap().into_vec();
        let (_, seq, payload) = kthena_kvevents::split_frames(&frames).unwrap();
        out.push((seq, payload.clone()));
    }
    out
}

fn replay_addr(sim: &kthena_sim::SimHandle) -> String {
    format!("tcp://127.0.0.1:{}", sim.kv_events_replay_port().unwrap())
}

/// Batches 0..n published; a raw DEALER request for k gets `["", seq, payload]` for k..n,
/// the very bytes published, then `["", END_SEQ, ""]`; the router's client agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_resends_the_published_batches_from_a_sequence_number() {
    let sim = kthena_sim::spawn(replaying_sim(10_000)).await.unwrap();
    let mut sub = subscriber(&sim).await;
    completions(&sim, 5).await;
    let live = drain(&mut sub).await;
    let n = live.len();
    assert!(n >= 5, "{n} batches");
    let seqs: Vec<u64> = live.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (0..n as u64).collect::<Vec<_>>());

    let mut dealer = zeromq::DealerSocket::new();
    dealer.connect(&replay_addr(&sim)).await.unwrap();
    let mut req = ZmqMessage::from(Bytes::new());
    req.push_back(Bytes::copy_from_slice(&2u64.to_be_bytes()));
    dealer.send(req).await.unwrap();
    for (seq, payload) in &live[2..] {
        let reply = dealer.recv().await.unwrap().into_vec();
        let want = vec![
            Bytes::new(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        ];
        assert_eq!(reply, want);
    }
    let end = dealer.recv().await.unwrap().into_vec();
    let end_seq = Bytes::from_static(&kthena_kvevents::END_SEQ);
    assert_eq!(end, vec![Bytes::new(), end_seq, Bytes::new()]);

    assert_eq!(replay(&replay_addr(&sim), 0, u64::MAX).await.unwrap(), live);
    assert_eq!(
        replay(&replay_addr(&sim), 3, n as u64 - 1).await.unwrap(),
        live[3..n - 1].to_vec()
    );
    assert!(
        replay(&replay_addr(&sim), n as u64, u64::MAX)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A buffer of 3 batches keeps the newest 3: a replay from 0 returns them alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_replay_buffer_drops_the_oldest_batches() {
    let sim = kthena_sim::spawn(replaying_sim(3)).await.unwrap();
    let mut sub = subscriber(&sim).await;
    completions(&sim, 5).await;
    let live = drain(&mut sub).await;
    let n = live.len();
    assert!(n >= 5, "{n} batches");
    assert_eq!(
        replay(&replay_addr(&sim), 0, u64::MAX).await.unwrap(),
        live[n - 3..].to_vec()
    );
}

/// On the in-memory network the replay endpoint answers one request with every reply
/// message, in the ZMQ form, and the published topic carries the same batches.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn in_memory_replay_answers_like_the_zmq_socket() {
    let net = kthena_memnet::MemNet::new();
    let sim = kthena_sim::spawn_in_memory(replaying_sim(10_000), &net)
        .await
        .unwrap();
    let ip = sim.addr().ip();
    let events = format!("tcp://{ip}:{}", sim.kv_events_port().unwrap());
    let mut sub = net.subscribe(&events);
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build::<_, http_body_util::Full<Bytes>>(kthena_memnet::Connector::memory(net.clone()));
    let body = serde_json::json!({"model": "m", "prompt": "hello ".repeat(60), "max_tokens": 2});
    let req = http::Request::post(format!("{}/v1/completions", sim.base_url()))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let first = sub.recv().await.unwrap();
    let replay_ep = format!("tcp://{ip}:{}", sim.kv_events_replay_port().unwrap());
    let request = vec![Bytes::new(), Bytes::copy_from_slice(&0u64.to_be_bytes())];
    let replies = net.request(&replay_ep, request).await.unwrap();
    assert_eq!(
        replies.first().unwrap(),
        &vec![Bytes::new(), first[1].clone(), first[2].clone()]
    );
    let end_seq = Bytes::from_static(&kthena_kvevents::END_SEQ);
    assert_eq!(
        replies.last().unwrap(),
        &vec![Bytes::new(), end_seq, Bytes::new()]
    );
}

/// A router started after an engine cached a long prompt sends that prompt's next request
/// there (its index filled by the replay at subscription, before any new event); without a
/// replay address it matches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_started_late_routes_to_the_engine_holding_the_prefix() {
    let mut sims = Vec::new();
    for _ in 0..3 {
        let mut c = sim_config(KvEventsFormat::Map);
        c.kv_events_replay_port = Some(0);
        sims.push(kthena_sim::spawn(c).await.unwrap());
    }
    // sim-2 computes a long prompt before any router exists.
    let sys = system_prompt("a bicycle shop");
    direct_chat(sims[2].addr(), &sys, "What are your opening hours?").await;
    let named: Vec<(String, std::net::SocketAddr, u16)> = sims
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("sim-{i}"), s.addr(), s.kv_events_port().unwrap()))
        .collect();
    let all: Vec<(&str, std::net::SocketAddr, u16)> =
        named.iter().map(|(n, a, k)| (n.as_str(), *a, *k)).collect();
    let plain = config(&all);
    let mut with_replay = plain.clone();
    for s in &sims {
        let kv = s.kv_events_port().unwrap();
        let from = format!("kvEvents: \"tcp://127.0.0.1:{kv}\"}}");
        let to = format!(
            "kvEvents: \"tcp://127.0.0.1:{kv}\", kvEventsReplay: \"{}\"}}",
            replay_addr(s)
        );
        with_replay = with_replay.replace(&from, &to);
    }
    assert_ne!(with_replay, plain);

    let ctx = ctx(&with_replay).await;
    let probe = ctx.chat_tokens(&sys, "Do you repair tires?");
    let total = probe.len().div_ceil(16) as u32;
    let held = ctx.wait_matched("sim-2", &probe, |m| m > 0).await;
    assert!(
        held * 10 >= total * 9,
        "sim-2 holds {held} of {total} blocks"
    );
    for n in ["sim-0", "sim-1"] {
        assert_eq!(ctx.matched(n, &probe), 0, "{n}");
    }
    let (pod, ratio) = ctx.route(&sys, "Do you repair tires?").await;
    assert_eq!(pod, "sim-2");
    assert_eq!(ratio, f64::from(held) / f64::from(total));
    let replays = r#"kthena_router_kv_events_replays_total{endpoint="default/sim-2",result="ok"}"#;
    assert_eq!(ctx.r.metric(replays).await, 1.0);
    ctx.r.router.shutdown().await;

    // The same start without replay addresses: nothing is known until new events arrive.
    let ctx = self::ctx(&plain).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ctx.matched("sim-2", &probe), 0);
    let (_, ratio) = ctx.route(&sys, "Do you repair tires?").await;
    assert_eq!(ratio, 0.0);
    ctx.r.router.shutdown().await;
}

/// A router on `config` with Qwen3's tokenizer beside it, ready and subscribed to its three
/// engines.
async fn ctx(config: &str) -> Ctx {
    let r = KvRouter::start(config, &manifests(MODEL, "sim")).await;
    let dir = qwen3_dir();
    let tok = ModelTokenizer::load(
        MODEL,
        &dir.join("tokenizer.json"),
        Some(&dir.join("tokenizer_config.json")),
        0,
    )
    .unwrap();
    r.wait_ready().await;
    for n in ["sim-0", "sim-1", "sim-2"] {
        let series = format!("kthena_router_kv_events_subscribed{{endpoint=\"default/{n}\"}}");
        let v = r
            .wait_metric(&series, Duration::from_secs(5), |v| v == 1.0)
            .await;
        assert_eq!(v, 1.0, "{n}");
    }
    Ctx { r, tok }
}
