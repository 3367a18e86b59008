//! KV-event ingestion over real ZMQ sockets: the captured vLLM 0.32 frames, sequence gaps
//! (counted, replayed from a ROUTER socket, or marked uncertain) and rollbacks.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::sync::Arc;
use std::time::Duration;

use crate::kv_support::*;
use bytes::Bytes;
use kthena_kvevents::{decode_batch, split_frames};
use kthena_router::kv::{Ingest, KvMetrics, KvSource};
use kthena_sched::{
    Candidate, EndpointId, InMemoryKvIndex, KvEvent, KvIndex, KvQuery, token_block_hashes,
};
use rmpv::Value;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

fn b64(s: &str) -> Vec<u8> {
    // Standard alphabet with padding (the sample file's encoding).
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut buf = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = A.iter().position(|a| *a == c).unwrap() as u32;
        buf = (buf << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    out
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The real frames captured from vLLM 0.32 on CPU: an array batch holding one map event.
#[test]
fn decodes_captured_vllm_frames() {
    let text = std::fs::read_to_string(vllm_samples().join("kv-events.json")).unwrap();
    let frames: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    let msg = [
        Bytes::from(f["topic"].as_str().unwrap().to_owned()),
        Bytes::from(hex(f["seq_be_u64_hex"].as_str().unwrap())),
        Bytes::from(b64(f["payload_msgpack_b64"].as_str().unwrap())),
    ];
    let (topic, seq, payload) = split_frames(&msg).unwrap();
    assert_eq!(&topic[..], b"kv@127.0.0.1@tiny-qwen3");
    assert_eq!(seq, 2);
    let batch = decode_batch(payload).unwrap();
    assert_eq!(batch.ts, 1_796_038_385.906_672_2);
    assert_eq!(batch.dp_rank, Some(0));
    assert_eq!(batch.ignored, 0);
    assert_eq!(batch.events.len(), 1);
    let KvEvent::BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        block_size,
    } = &batch.events[0]
    else {
        panic!("expected BlockStored, got {:?}", batch.events[0]);
    };
    assert_eq!(
        block_hashes,
        &vec![
            5_078_055_017_064_626_078,
            5_150_441_231_259_576_797,
            1_003_423_022_493_429_422,
            14_657_971_117_197_887_257,
            1_897_865_283_679_170_430
        ]
    );
    assert_eq!(*parent_block_hash, None);
    assert_eq!(*block_size, 128);
    assert_eq!(token_ids.len(), 640);
    assert_eq!(
        token_ids[..10],
        [4340, 83165, 11307, 3974, 2994, 723, 13703, 70761, 7784, 0]
    );

    // The index takes it and matches the same tokens to this endpoint.
    let index = InMemoryKvIndex::new(128, 1000).unwrap();
    let ep = EndpointId::new("default/vllm");
    index.apply(&ep, &batch.events[0]).unwrap();
    assert_eq!(index.len(), 5);
    let mut hashes = Vec::new();
    token_block_hashes(token_ids, 128, 128, &mut hashes);
    let cand = Candidate::new(ep, "tiny-qwen3");
    let mut out = [0u32];
    index.match_prefix(
        &KvQuery {
            model: "tiny-qwen3",
            token_ids,
            block_size: 128,
            block_hashes: &hashes,
        },
        &[&cand],
        &mut out,
    );
    assert_eq!(out, [5]);
}

fn stored(first: u32, blocks: u32, parent: Option<u64>, block_size: u32) -> Value {
    let tokens: Vec<Value> = (first..first + blocks * block_size)
        .map(Value::from)
        .collect();
    Value::Map(vec![
        (Value::from("type"), Value::from("BlockStored")),
        (
            Value::from("block_hashes"),
            Value::Array(
                (0..blocks)
                    .map(|i| Value::from(u64::from(first + i) + 1000))
                    .collect(),
            ),
        ),
        (
            Value::from("parent_block_hash"),
            parent.map_or(Value::Nil, Value::from),
        ),
        (Value::from("token_ids"), Value::Array(tokens)),
        (Value::from("block_size"), Value::from(block_size)),
    ])
}

fn batch(events: Vec<Value>) -> Bytes {
    let mut out = Vec::new();
    rmpv::encode::write_value(
        &mut out,
        &Value::Array(vec![Value::F64(1.0), Value::Array(events), Value::from(0)]),
    )
    .unwrap();
    Bytes::from(out)
}

fn frames(seq: u64, payload: Bytes) -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"kv@test"),
        Bytes::copy_from_slice(&seq.to_be_bytes()),
        payload,
    ]
}

/// A gap is replayed from the engine's ROUTER socket; a rollback clears the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gap_replay_and_rollback() {
    // A vLLM-style replay server: answers [id, "", start] with every buffered batch >= start.
    let mut router = zeromq::RouterSocket::new();
    let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
    let buffered: Vec<(u64, Bytes)> = vec![
        (1, batch(vec![stored(1, 1, Some(1000), 1)])),
        (2, batch(vec![stored(2, 1, Some(1001), 1)])),
    ];
    let replay_server = serve_replay(router, buffered, 1);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = KvMetrics::register(&mut registry);
    let index: Arc<dyn KvIndex> = Arc::new(InMemoryKvIndex::new(1, 100).unwrap());
    let id = EndpointId::new("default/e");
    let source = KvSource {
        endpoint: id.clone(),
        events: "tcp://127.0.0.1:1".to_owned(),
        replay: Some(ep.to_string()),
    };
    let mut ingest = Ingest::new(source, Arc::clone(&index), metrics.clone());
    ingest
        .handle(&frames(0, batch(vec![stored(0, 1, None, 1)])))
        .await;
    assert_eq!(index.len(), 1);
    // seq 3 arrives after 0: batches 1 and 2 are replayed, then 3 applies on top of them.
    let third = frames(3, batch(vec![stored(3, 1, Some(1002), 1)]));
    let (router, ()) = tokio::join!(replay_server, ingest.handle(&third));
    drop(router);
    assert!(!ingest.uncertain());
    assert_eq!(index.len(), 4);
    let text = encode(&registry);
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_gaps_total{endpoint="default/e"}"#
        ),
        1.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_missed_batches_total{endpoint="default/e"}"#
        ),
        2.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_replays_total{endpoint="default/e",result="ok"}"#
        ),
        1.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_total{endpoint="default/e",type="BlockStored"}"#
        ),
        4.0
    );
    // The chain 0,1,2,3 matches fully.
    let mut out = [0u32];
    let tokens = [0u32, 1, 2, 3];
    let mut hashes = Vec::new();
    token_block_hashes(&tokens, 1, 128, &mut hashes);
    let cand = Candidate::new(id.clone(), "m");
    index.match_prefix(
        &KvQuery {
            model: "m",
            token_ids: &tokens,
            block_size: 1,
            block_hashes: &hashes,
        },
        &[&cand],
        &mut out,
    );
    assert_eq!(out, [4]);

    // A duplicate is dropped; a rollback (engine restart) clears the endpoint first.
    ingest
        .handle(&frames(3, batch(vec![stored(9, 1, None, 1)])))
        .await;
    assert_eq!(index.len(), 4);
    ingest
        .handle(&frames(0, batch(vec![stored(50, 2, None, 1)])))
        .await;
    assert_eq!(index.len(), 2);
    let text = encode(&registry);
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_rollbacks_total{endpoint="default/e"}"#
        ),
        1.0
    );

    // A gap whose replay fails (nobody listens any more) marks the endpoint uncertain.
    ingest.handle(&frames(7, batch(vec![]))).await;
    assert!(ingest.uncertain());
    let text = encode(&registry);
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_replays_total{endpoint="default/e",result="failed"}"#
        ),
        1.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_uncertain{endpoint="default/e"}"#
        ),
        1.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_gaps_total{endpoint="default/e"}"#
        ),
        2.0
    );
    // An undecodable payload and a malformed message are counted, not fatal.
    ingest.handle(&frames(8, Bytes::from_static(b"\xc1"))).await;
    ingest
        .handle(&[Bytes::from_static(b"only-one-frame")])
        .await;
    let text = encode(&registry);
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_decode_errors_total{endpoint="default/e"}"#
        ),
        2.0
    );
}

/// Answers one replay request like vLLM: every buffered batch with seq >= start, then
/// `END_SEQ`; checks the requested start.
async fn serve_replay(
    mut router: zeromq::RouterSocket,
    buffered: Vec<(u64, Bytes)>,
    expect_start: u64,
) -> zeromq::RouterSocket {
    let req = router.recv().await.unwrap().into_vec();
    assert_eq!(req.len(), 3, "{req:?}");
    assert!(req[1].is_empty());
    let start = u64::from_be_bytes(req[2][..].try_into().unwrap());
    assert_eq!(start, expect_start);
    for (seq, p) in buffered.iter().filter(|(s, _)| *s >= start) {
        let mut m = ZmqMessage::from(req[0].clone());
        m.push_back(Bytes::new());
        m.push_back(Bytes::copy_from_slice(&seq.to_be_bytes()));
        m.push_back(p.clone());
        router.send(m).await.unwrap();
    }
    let mut end = ZmqMessage::from(req[0].clone());
    end.push_back(Bytes::new());
    end.push_back(Bytes::copy_from_slice(&kthena_kvevents::END_SEQ));
    end.push_back(Bytes::new());
    router.send(end).await.unwrap();
    router
}

/// A router that connects after the engine published batches 0 and 1 replays them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_join_replays_from_zero() {
    let mut router = zeromq::RouterSocket::new();
    let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
    let buffered = vec![
        (0, batch(vec![stored(0, 1, None, 1)])),
        (1, batch(vec![stored(1, 1, Some(1000), 1)])),
    ];
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = KvMetrics::register(&mut registry);
    let index: Arc<dyn KvIndex> = Arc::new(InMemoryKvIndex::new(1, 100).unwrap());
    let source = KvSource {
        endpoint: EndpointId::new("default/late"),
        events: "tcp://127.0.0.1:1".to_owned(),
        replay: Some(ep.to_string()),
    };
    let mut ingest = Ingest::new(source, Arc::clone(&index), metrics);
    let third = frames(2, batch(vec![stored(2, 1, Some(1001), 1)]));
    let (_router, ()) = tokio::join!(serve_replay(router, buffered, 0), ingest.handle(&third));
    assert_eq!(index.len(), 3);
    assert!(!ingest.uncertain());
    let text = encode(&registry);
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_replays_total{endpoint="default/late",result="ok"}"#
        ),
        1.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_rejected_total{endpoint="default/late"}"#
        ),
        0.0
    );
}

fn encode(r: &prometheus_client::registry::Registry) -> String {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, r).unwrap();
    s
}

/// Through the router: a publisher that skips sequence numbers is detected and counted per
/// endpoint, and the endpoint (without a replay address) is marked uncertain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_counts_sequence_gaps() {
    let mut publisher = zeromq::PubSocket::new();
    let ep = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let port = match ep {
        zeromq::Endpoint::Tcp(_, p) => p,
        other => panic!("unexpected endpoint {other:?}"),
    };
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = http.local_addr().unwrap();
    let config = format!(
        "scheduler:
  plugins:
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 1}}
kvCache: {{remoteTokenize: false}}
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: pub, address: \"{addr}\", labels: {{app: a}}, kvEvents: \"tcp://127.0.0.1:{port}\"}}
"
    );
    let r = KvRouter::start(&config, &manifests("m", "a")).await;
    let send = |seq: u64, events: Vec<Value>| {
        let mut m = ZmqMessage::from(Bytes::from_static(b"kv@127.0.0.1@m"));
        m.push_back(Bytes::copy_from_slice(&seq.to_be_bytes()));
        m.push_back(batch(events));
        m
    };
    // Until the subscription is live, repeat seq 0 (later copies are duplicates, dropped).
    let cleared =
        r#"kthena_router_kv_events_total{endpoint="default/pub",type="AllBlocksCleared"}"#;
    for _ in 0..200 {
        publisher
            .send(send(
                0,
                vec![Value::Map(vec![(
                    Value::from("type"),
                    Value::from("AllBlocksCleared"),
                )])],
            ))
            .await
            .unwrap();
        if r.metric(cleared).await >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(r.metric(cleared).await, 1.0);
    publisher
        .send(send(1, vec![stored(0, 2, None, 16)]))
        .await
        .unwrap();
    publisher
        .send(send(5, vec![stored(32, 1, Some(1001), 16)]))
        .await
        .unwrap();
    let gaps = r#"kthena_router_kv_events_gaps_total{endpoint="default/pub"}"#;
    assert_eq!(
        r.wait_metric(gaps, Duration::from_secs(5), |v| v >= 1.0)
            .await,
        1.0
    );
    let text = r.metrics().await;
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_missed_batches_total{endpoint="default/pub"}"#
        ),
        3.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_uncertain{endpoint="default/pub"}"#
        ),
        1.0
    );
    assert_eq!(
        metric_in(
            &text,
            r#"kthena_router_kv_events_total{endpoint="default/pub",type="BlockStored"}"#
        ),
        2.0
    );
    assert_eq!(metric_in(&text, "kthena_router_kv_index_entries"), 3.0);
    assert_eq!(r.router.snapshot().scheduler.kv_index().unwrap().len(), 3);
    drop(http);
    r.router.shutdown().await;
}
