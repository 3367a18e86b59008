//! Redis memory of Go Kthena's KV layout as a function of pods and cached blocks, measured on
//! the real `redis-server` of `scripts/services.sh` (database 11, which no other test uses):
//! 10 000 distinct blocks held by 1, 3 and 10 pods each, written as the runtime sidecar
//! writes them (`python/kthena/runtime/kv_cache_manager.py`): per block and pod one field of
//! the block hash `matrix:kv:block:{model}@{hash}` and one hash-mapping string
//! `vllm:kv:block:{pod}.{namespace}@{engine hash}` with a 24 h TTL. Prints (to stderr) the table of
//! `docs/kv-cache-routing.md` and checks generous upper bounds:
//!
//! ```sh
//! cargo test -p kthena-router --all-features --test it -- redis_memory:: --nocapture
//! ```

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use kthena_router::kv::{block_key, kthena_block_hash};

const DB11: &str = "redis://127.0.0.1:6379/11";
const BLOCKS: u32 = 10_000;
const MODEL: &str = "Qwen/Qwen3-8B";

fn redis() -> redis::Connection {
    redis::Client::open(DB11)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("redis-server must listen on 127.0.0.1:6379 (scripts/services.sh starts it)")
}

/// A Deployment pod's name (`{deployment}-{replicaset hash}-{5 chars}`) in `default`:
/// `qwen3-8b-5d8f7c9b6d-p0003.default`, 33 bytes.
fn owner(j: u32) -> String {
    format!("qwen3-8b-5d8f7c9b6d-p{j:04}.default")
}

/// `(key, engine hash)` of block `i`: the block key of 16 made-up token ids, and a 19-digit
/// vLLM block hash.
fn block(i: u32) -> (String, u64) {
    let tokens: Vec<u32> = (0..16).map(|t| i * 16 + t).collect();
    let h = kthena_block_hash(&tokens);
    (block_key(MODEL, h), h | (1 << 62))
}

/// Sum of `MEMORY USAGE` (bytes, `SAMPLES 0`) of `keys`, pipelined.
fn usage(c: &mut redis::Connection, keys: &[String]) -> u64 {
    let mut total = 0;
    for chunk in keys.chunks(1000) {
        let mut p = redis::pipe();
        for k in chunk {
            p.cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0);
        }
        let v: Vec<Option<u64>> = p.query(c).unwrap();
        total += v.into_iter().flatten().sum::<u64>();
    }
    total
}

fn used_memory(c: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Writes `owners` pods for every block as the sidecar does; returns (block keys, mapping
/// keys).
fn write(c: &mut redis::Connection, owners: u32) -> (Vec<String>, Vec<String>) {
    let (mut blocks, mut mappings) = (Vec::new(), Vec::new());
    let now = 1_767_225_600_i64;
    for chunk in (0..BLOCKS).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for &i in chunk {
            let (key, engine_hash) = block(i);
            for j in 0..owners {
                let o = owner(j);
                let mapping = format!("vllm:kv:block:{o}@{engine_hash}");
                p.cmd("SET")
                    .arg(&mapping)
                    .arg(engine_hash.to_string())
                    .ignore();
                p.cmd("EXPIRE").arg(&mapping).arg(86_400).ignore();
                p.cmd("HSET").arg(&key).arg(&o).arg(now).ignore();
                mappings.push(mapping);
            }
            blocks.push(key);
        }
        let () = p.query(c).unwrap();
    }
    (blocks, mappings)
}

/// Bytes per block key, per owner field and per mapping key, from 10 000 blocks held by 1,
/// 3 and 10 pods.
#[test]
fn memory_per_block_and_pod() {
    let mut c = redis();
    eprintln!(
        "| owners per block | block keys (bytes/block) | mapping keys (bytes/block/pod) | INFO used_memory delta (bytes/block) |"
    );
    eprintln!("|---|---|---|---|");
    let mut per_block = Vec::new();
    for owners in [1u32, 3, 10] {
        let () = redis::cmd("FLUSHDB").arg("SYNC").query(&mut c).unwrap();
        let before = used_memory(&mut c);
        let (blocks, mappings) = write(&mut c, owners);
        let after = used_memory(&mut c);
        let b = usage(&mut c, &blocks) as f64 / f64::from(BLOCKS);
        let m = usage(&mut c, &mappings) as f64 / f64::from(BLOCKS * owners);
        let delta = (after - before) as f64 / f64::from(BLOCKS);
        eprintln!("| {owners} | {b:.0} | {m:.0} | {delta:.0} |");
        per_block.push((owners, b, m, delta));
        // Generous bounds: a block key under 120 + 64 bytes per owner, a mapping key under
        // 200 bytes, everything under 200 + 300 bytes per owner and block
        // (`used_memory` is the whole server's: other tests may write meanwhile).
        assert!(b < 120.0 + 64.0 * f64::from(owners), "{b}");
        assert!(m < 200.0, "{m}");
        assert!(delta < 200.0 + 300.0 * f64::from(owners), "{delta}");
    }
    let () = redis::cmd("FLUSHDB").arg("SYNC").query(&mut c).unwrap();
    // Per owner field in a block key: the slope between 1 and 10 owners.
    let field = (per_block[2].1 - per_block[0].1) / 9.0;
    eprintln!(
        "block key: {:.0} + {field:.1} x owners bytes",
        per_block[0].1 - field
    );
    assert!(field > 10.0 && field < 64.0, "{field}");
}
