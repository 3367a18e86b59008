//! kthena-sim's block hashes against a real vLLM 0.32 engine: the `BlockStored` event captured
//! from vLLM on CPU (`spec/samples/vllm-0.32-cpu/kv-events.json`, `PYTHONHASHSEED=0`, block
//! size 128, default `--prefix-caching-hash-algo`) is decoded, and the simulator, fed the same
//! token ids with the same seed and block size, computes and publishes the same hashes: as ints
//! by default, and as the 32-byte digests whose low 64 bits are those ints with
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use kthena_sim::{BlockHasher, Config, HashAlgo, RequestKeys, SimHandle, spawn};
use rmpv::Value;
use serde_json::json;
use zeromq::{Socket, SocketRecv};

use crate::common;

const BS: usize = 128;

fn samples() -> PathBuf {
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/spec/samples");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/spec/samples")
    }
}

fn field<'a>(ev: &'a Value, key: &str) -> &'a Value {
    ev.as_map()
        .unwrap()
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {key} in {ev}"))
}

/// The first `BlockStored` event of a msgpack batch `[ts, [events], rank]`.
fn block_stored(payload: &[u8]) -> Value {
    let batch = rmpv::decode::read_value(&mut &payload[..]).unwrap();
    batch.as_array().unwrap()[1]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| field(e, "type").as_str() == Some("BlockStored"))
        .cloned()
        .expect("a BlockStored event")
}

fn ints(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// (token ids, block hashes) of the real vLLM event.
fn vllm_sample() -> (Vec<u32>, Vec<u64>) {
    let path = samples().join("vllm-0.32-cpu/kv-events.json");
    let frames: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let payload = base64::engine::general_purpose::STANDARD
        .decode(frames[0]["payload_msgpack_b64"].as_str().unwrap())
        .unwrap();
    let ev = block_stored(&payload);
    assert_eq!(field(&ev, "block_size").as_u64(), Some(BS as u64));
    assert!(field(&ev, "parent_block_hash").is_nil());
    let tokens = ints(field(&ev, "token_ids"))
        .into_iter()
        .map(|t| u32::try_from(t).unwrap())
        .collect();
    (tokens, ints(field(&ev, "block_hashes")))
}

#[test]
fn computes_the_hashes_of_the_real_vllm_event() {
    let (tokens, expected) = vllm_sample();
    assert_eq!(tokens.len(), 5 * BS);
    assert_eq!(
        expected,
        [
            5_078_055_017_064_626_078,
            5_150_441_231_259_576_797,
            1_003_423_022_493_429_422,
            14_657_971_117_197_887_257,
            1_897_865_283_679_170_430
        ]
    );
    let hasher = BlockHasher::new(HashAlgo::default(), Some("0"));
    let got: Vec<u64> = hasher
        .block_hashes(&tokens, BS, RequestKeys::default())
        .iter()
        .map(|h| h.to_u64())
        .collect();
    assert_eq!(got, expected);
    // Another seed, or another algorithm, gives other hashes.
    let other = BlockHasher::new(HashAlgo::default(), Some("1"));
    assert_ne!(
        other.block_hashes(&tokens, BS, RequestKeys::default())[0].to_u64(),
        expected[0]
    );
    let cbor = BlockHasher::new(HashAlgo::Sha256Cbor, Some("0"));
    assert_ne!(
        cbor.block_hashes(&tokens, BS, RequestKeys::default())[0].to_u64(),
        expected[0]
    );
}

async fn sim(int_hashes: bool) -> SimHandle {
    let mut c = Config::default()
        .with_ephemeral_port()
        .with_model("tiny-qwen3")
        .with_time_scale(100.0)
        .with_hash_seed("0");
    c.kv_events_port = Some(0);
    c.kv_events_use_int_block_hashes = int_hashes;
    c.profile.block_size = BS;
    c.profile.num_gpu_blocks = 64;
    c.profile.max_model_len = 2048;
    spawn(c).await.unwrap()
}

/// Sends `prompt` (then fresh filler prompts until the subscription is live) and returns the
/// published `BlockStored` event whose tokens are `prompt`'s.
async fn published(sim: &SimHandle, prompt: &[u32]) -> Value {
    let mut sub = zeromq::SubSocket::new();
    let port = sim.kv_events_port().unwrap();
    sub.connect(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap();
    sub.subscribe("kv@").await.unwrap();
    let url = format!("{}/v1/completions", sim.base_url());
    let want: Vec<u64> = prompt.iter().map(|t| u64::from(*t)).collect();
    for round in 0..100u32 {
        // The first rounds may be lost to ZMQ's late-joiner drop; the engine caches the
        // prompt once, so a lost BlockStored is re-provoked after a reset.
        let body = json!({"model": "tiny-qwen3", "prompt": prompt, "max_tokens": 1});
        let (status, _) = common::post_json(&url, &body).await;
        assert_eq!(status, 200);
        while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
            let batch = rmpv::decode::read_value(&mut m.get(2).unwrap().as_ref()).unwrap();
            for ev in batch.as_array().unwrap()[1].as_array().unwrap() {
                if field(ev, "type").as_str() == Some("BlockStored")
                    && ints(field(ev, "token_ids")) == want
                {
                    return ev.clone();
                }
            }
        }
        assert!(round < 99, "no BlockStored for the prompt");
        let reset = format!("{}/reset_prefix_cache", sim.base_url());
        assert_eq!(common::send("POST", &reset, None).await.0, 200);
    }
    unreachable!()
}

#[tokio::test]
async fn publishes_the_hashes_of_the_real_vllm_event() {
    let (tokens, expected) = vllm_sample();
    let sim = sim(true).await;
    let ev = published(&sim, &tokens).await;
    assert_eq!(ints(field(&ev, "block_hashes")), expected);
    assert!(field(&ev, "parent_block_hash").is_nil());
    assert_eq!(
        field(&ev, "extra_keys").as_array().unwrap(),
        &vec![Value::Nil; 5]
    );
    sim.kill().await;
}

#[tokio::test]
async fn publishes_32_byte_digests_when_int_hashes_are_off() {
    let (tokens, expected) = vllm_sample();
    let sim = sim(false).await;
    let ev = published(&sim, &tokens).await;
    let digests: Vec<&[u8]> = field(&ev, "block_hashes")
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_slice().unwrap())
        .collect();
    assert!(digests.iter().all(|d| d.len() == 32));
    let low: Vec<u64> = digests
        .iter()
        .map(|d| u64::from_be_bytes(d[24..].try_into().unwrap()))
        .collect();
    assert_eq!(low, expected);
    sim.kill().await;
}
