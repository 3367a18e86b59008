//! KV events over ZMQ: a pure-Rust subscriber decodes both encodings with gap-free sequence
//! numbers, and a libzmq subscriber (pyzmq) receives the same frames.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Stdio;
use std::time::Duration;

use crate::common;
use crate::common::post_json;
use kthena_sim::{BlockHasher, Config, HashAlgo, KvEventsFormat, RequestKeys, SimHandle, spawn};
use rmpv::Value;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use zeromq::{Socket, SocketRecv};

const BS: usize = 4;

fn cfg(format: KvEventsFormat) -> Config {
    let mut c = Config::default()
        .with_ephemeral_port()
        .with_model("m")
        .with_time_scale(50.0)
        .with_hash_seed("0");
    c.kv_events_port = Some(0);
    c.kv_events_format = format;
    c.profile.block_size = BS;
    c.profile.num_gpu_blocks = 16;
    c.profile.max_model_len = 64;
    c
}

/// The int block hashes vLLM (seed "0", default algorithm) gives `tokens`.
fn vllm_hashes(tokens: &[u32]) -> Vec<u64> {
    BlockHasher::new(HashAlgo::Sha256, Some("0"))
        .block_hashes(tokens, BS, RequestKeys::default())
        .iter()
        .map(|h| h.to_u64())
        .collect()
}

fn prompt(seed: u32) -> Vec<u32> {
    (0..8u32).map(|i| seed * 100 + i).collect()
}

/// A decoded event: (kind, block hashes, parent, token ids).
type Ev = (String, Vec<u64>, Option<u64>, Vec<u64>);

fn field<'a>(ev: &'a Value, key: &str, pos: usize) -> Option<&'a Value> {
    match ev {
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v),
        Value::Array(a) => a.get(pos),
        _ => None,
    }
}

fn decode(payload: &[u8], format: KvEventsFormat) -> Vec<Ev> {
    let batch = rmpv::decode::read_value(&mut &payload[..]).unwrap();
    let batch = batch.as_array().unwrap();
    assert_eq!(batch.len(), 3);
    assert!(batch[0].as_f64().unwrap() > 1.7e9);
    assert_eq!(batch[2].as_u64(), Some(0));
    batch[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|ev| {
            let kind = match (format, ev) {
                (KvEventsFormat::Map, Value::Map(_)) => {
                    field(ev, "type", 0).unwrap().as_str().unwrap().to_owned()
                }
                (KvEventsFormat::Array, Value::Array(a)) => a[0].as_str().unwrap().to_owned(),
                _ => panic!("wrong encoding: {ev}"),
            };
            let ints = |v: Option<&Value>| -> Vec<u64> {
                v.and_then(Value::as_array)
                    .map(|a| a.iter().map(|x| x.as_u64().unwrap()).collect())
                    .unwrap_or_default()
            };
            let hashes = ints(field(ev, "block_hashes", 1));
            if kind == "BlockStored" {
                assert_eq!(
                    field(ev, "block_size", 4).unwrap().as_u64(),
                    Some(BS as u64)
                );
                assert_eq!(field(ev, "medium", 6).unwrap().as_str(), Some("GPU"));
                assert!(field(ev, "lora_name", 7).unwrap().is_nil());
                let parent = field(ev, "parent_block_hash", 2).unwrap().as_u64();
                (kind, hashes, parent, ints(field(ev, "token_ids", 3)))
            } else {
                (kind, hashes, None, Vec::new())
            }
        })
        .collect()
}

async fn complete(sim: &SimHandle, p: &[u32]) {
    let (status, _) = post_json(
        &format!("{}/v1/completions", sim.base_url()),
        &json!({"model": "m", "prompt": p, "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 200);
}

async fn rust_subscriber_decodes(format: KvEventsFormat) {
    let sim = spawn(cfg(format)).await.unwrap();
    let mut sub = zeromq::SubSocket::new();
    sub.connect(&format!(
        "tcp://127.0.0.1:{}",
        sim.kv_events_port().unwrap()
    ))
    .await
    .unwrap();
    sub.subscribe("kv@").await.unwrap();
    // Wait until the subscription is live (ZMQ drops messages for late joiners).
    let mut n = 0u32;
    let first = loop {
        n += 1;
        complete(&sim, &prompt(1000 + n)).await;
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), sub.recv()).await {
            break m;
        }
    };
    let mut frames = vec![first];
    // 8-token prompts are 2 blocks of 4; with 16 blocks in the cache, 10 distinct prompts
    // force evictions.
    for i in 0..10u32 {
        complete(&sim, &prompt(i)).await;
    }
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await {
        frames.push(m);
    }
    let mut seqs = Vec::new();
    let mut events = Vec::new();
    for f in &frames {
        assert_eq!(f.len(), 3);
        assert_eq!(f.get(0).unwrap().as_ref(), b"kv@127.0.0.1@m");
        seqs.push(u64::from_be_bytes(
            f.get(1).unwrap().as_ref().try_into().unwrap(),
        ));
        events.extend(decode(f.get(2).unwrap(), format));
    }
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gaps in {seqs:?}"
    );
    let p0 = prompt(0);
    let stored = events
        .iter()
        .find(|e| {
            e.0 == "BlockStored" && e.3 == p0.iter().map(|&t| u64::from(t)).collect::<Vec<_>>()
        })
        .expect("BlockStored for prompt 0");
    assert_eq!(stored.1, vllm_hashes(&p0));
    assert_eq!(stored.2, None);
    let removed: Vec<u64> = events
        .iter()
        .filter(|e| e.0 == "BlockRemoved")
        .flat_map(|e| e.1.clone())
        .collect();
    assert!(!removed.is_empty(), "no BlockRemoved in {events:?}");
    // Resetting the prefix cache of an idle engine clears everything.
    let (status, _) = common::send(
        "POST",
        &format!("{}/reset_prefix_cache", sim.base_url()),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let m = tokio::time::timeout(Duration::from_secs(2), sub.recv())
        .await
        .unwrap()
        .unwrap();
    let seq = u64::from_be_bytes(m.get(1).unwrap().as_ref().try_into().unwrap());
    assert_eq!(seq, seqs.last().unwrap() + 1);
    let evs = decode(m.get(2).unwrap(), format);
    assert_eq!(evs.last().unwrap().0, "AllBlocksCleared");
    sim.kill().await;
}

#[tokio::test]
async fn rust_subscriber_map_encoding() {
    rust_subscriber_decodes(KvEventsFormat::Map).await;
}

#[tokio::test]
async fn rust_subscriber_array_encoding() {
    rust_subscriber_decodes(KvEventsFormat::Array).await;
}

const PY_SUB: &str = r#"
import json, sys, zmq, msgpack
ctx = zmq.Context()
s = ctx.socket(zmq.SUB)
s.connect("tcp://127.0.0.1:%s" % sys.argv[1])
s.setsockopt(zmq.SUBSCRIBE, b"kv@")
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    topic, seq, payload = s.recv_multipart()
    ts, events, rank = msgpack.unpackb(payload)
    print(json.dumps({"topic": topic.decode(), "seq": int.from_bytes(seq, "big"),
                      "events": events, "rank": rank}), flush=True)
"#;

#[tokio::test]
async fn pyzmq_subscriber_interoperates() {
    let sim = spawn(cfg(KvEventsFormat::Map)).await.unwrap();
    let port = sim.kv_events_port().unwrap();
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", PY_SUB, &port.to_string(), "3"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("ready"));
    let mut got = Vec::new();
    let mut n = 0u32;
    while got.len() < 3 {
        n += 1;
        assert!(n < 200, "pyzmq subscriber received nothing");
        complete(&sim, &prompt(n)).await;
        while let Ok(Ok(Some(line))) =
            tokio::time::timeout(Duration::from_millis(50), lines.next_line()).await
        {
            got.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        }
    }
    let seqs: Vec<u64> = got.iter().map(|g| g["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    let ev = &got[0]["events"][0];
    assert_eq!(got[0]["topic"], "kv@127.0.0.1@m");
    assert_eq!(got[0]["rank"], 0);
    assert_eq!(ev["type"], "BlockStored");
    assert_eq!(ev["block_size"], BS);
    assert_eq!(ev["medium"], "GPU");
    assert_eq!(ev["kv_cache_spec_kind"], "full_attention");
    assert_eq!(ev["token_ids"].as_array().unwrap().len(), 8);
    let tokens: Vec<u32> = ev["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| u32::try_from(t.as_u64().unwrap()).unwrap())
        .collect();
    let hashes: Vec<u64> = ev["block_hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_u64().unwrap())
        .collect();
    assert_eq!(hashes, vllm_hashes(&tokens));
    child.wait().await.unwrap();
    sim.kill().await;
}
