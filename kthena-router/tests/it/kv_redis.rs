//! The Redis-backed KV index against a real `redis-server` on 127.0.0.1:6379 (started by
//! `scripts/services.sh`), with keys written exactly as Go Kthena's runtime sidecar writes them.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use crate::kv_support::*;
use http::StatusCode;
use kthena_openai::Message;
use kthena_router::kv::{RedisKvIndex, block_key, kthena_block_hash};
use kthena_router::tokenize::ModelTokenizer;
use kthena_sched::{Candidate, KvIndex as _, KvQuery, token_block_hashes};

const REDIS: &str = "redis://127.0.0.1:6379";

fn redis() -> redis::Connection {
    redis::Client::open(REDIS)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("redis-server must listen on 127.0.0.1:6379 (scripts/services.sh starts it)")
}

/// Writes `owner` for the first `blocks` blocks of `tokens` as the sidecar does.
fn write_owner(
    conn: &mut redis::Connection,
    model: &str,
    tokens: &[u32],
    blocks: usize,
    owner: &str,
) {
    for block in tokens.chunks(16).take(blocks) {
        let key = block_key(model, kthena_block_hash(block));
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg(owner)
            .arg(1_800_000_000)
            .query(conn)
            .unwrap();
        let _: () = redis::cmd("EXPIRE").arg(&key).arg(600).query(conn).unwrap();
    }
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    )
}

#[test]
fn matches_go_kthena_layout() {
    let mut conn = redis();
    let model = unique("redis-model");
    let tokens: Vec<u32> = (0..100).collect(); // 7 blocks of 16 (the last has 4 tokens)
    write_owner(&mut conn, &model, &tokens, 7, "vllm-1.prod");
    write_owner(&mut conn, &model, &tokens, 2, "vllm-0.prod");
    // An owner of block 3 only does not match from block 0.
    write_owner(&mut conn, &model, &tokens[48..], 1, "vllm-2.prod");
    let index = RedisKvIndex::new(REDIS, Duration::from_secs(1)).unwrap();
    let mut hashes = Vec::new();
    token_block_hashes(&tokens, 16, 128, &mut hashes);
    let cands = [
        Candidate::new("prod/vllm-0", "m"),
        Candidate::new("prod/vllm-1", "m"),
        Candidate::new("prod/vllm-2", "m"),
    ];
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = [9u32; 3];
    let q = KvQuery {
        model: &model,
        token_ids: &tokens,
        block_size: 16,
        block_hashes: &hashes,
    };
    index.match_prefix(&q, &refs, &mut out);
    assert_eq!(out, [2, 7, 0]);
    // maxBlocksToMatch caps the lookup.
    index.match_prefix(
        &KvQuery {
            block_hashes: &hashes[..3],
            ..q
        },
        &refs,
        &mut out,
    );
    assert_eq!(out, [2, 3, 0]);
    assert!(index.len() >= 7, "{}", index.len()); // block 3 is shared with vllm-2
    assert_eq!(index.errors(), 0);

    // Redis unreachable: every candidate scores 0 and the error is counted.
    let down = RedisKvIndex::new("redis://127.0.0.1:1", Duration::from_millis(200)).unwrap();
    let mut out = [9u32; 3];
    down.match_prefix(&q, &refs, &mut out);
    assert_eq!(out, [0, 0, 0]);
    assert_eq!(down.errors(), 1);
}

/// The router reads the sidecar's keys per request and routes to the owner of the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_routes_by_redis_index() {
    let mut sims = Vec::new();
    for _ in 0..2 {
        let c = kthena_sim::Config::default()
            .with_ephemeral_port()
            .with_model("qwen3")
            .with_time_scale(100.0);
        sims.push(kthena_sim::spawn(c).await.unwrap());
    }
    let model = unique("public");
    let dir = qwen3_dir();
    let config = format!(
        "metricsScrapeInterval: 100ms
scheduler:
  plugins:
    Score:
      enabled:
      - {{name: kvcache-aware, weight: 2}}
      - {{name: least-request, weight: 1}}
kvCache:
  index: redis
  redis: {{url: \"{REDIS}\", timeout: 1s}}
  tokenizers:
  - {{model: qwen3, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}
standalone:
  manifests: [manifests.yaml]
  endpoints:
  - {{name: sim-0, address: \"{}\", labels: {{app: s}}}}
  - {{name: sim-1, address: \"{}\", labels: {{app: s}}}}
",
        dir.join("tokenizer.json").display(),
        dir.join("tokenizer_config.json").display(),
        sims[0].addr(),
        sims[1].addr()
    );
    let r = KvRouter::start(
        &config,
        &manifests("qwen3", "s").replace("modelName: public", &format!("modelName: {model}")),
    )
    .await;
    r.wait_ready().await;
    let system = "You answer questions about trains. ".repeat(40);
    let tok = ModelTokenizer::load(
        "qwen3",
        &dir.join("tokenizer.json"),
        Some(&dir.join("tokenizer_config.json")),
        0,
    )
    .unwrap();
    let text = tok
        .render_chat(&[
            Message {
                role: "system".into(),
                content: system.clone(),
            },
            Message {
                role: "user".into(),
                content: "When?".into(),
            },
        ])
        .unwrap();
    let tokens = tok.encode_uncached(&text, false).unwrap();
    let total = tokens.len().div_ceil(16);
    let mut conn = redis();
    write_owner(&mut conn, &model, &tokens, total - 1, "sim-1.default");
    let body = serde_json::json!({"model": model, "max_tokens": 2,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "When?"}]});
    let (status, v) = post_json(&format!("{}/v1/chat/completions", r.url()), &body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(r.access_log().last().unwrap()["selected_pod"], "sim-1");
    let sum = r
        .metric(&format!(
            "kthena_router_kvcache_aware_match_ratio_sum{{model=\"{model}\"}}"
        ))
        .await;
    assert_eq!(sum, (total - 1) as f64 / total as f64);
    for s in sims {
        s.kill().await;
    }
    r.router.shutdown().await;
}

/// A Pod of `namespace` whose only container started at `started` (RFC 3339).
fn started_pod(
    namespace: &str,
    name: &str,
    started: &str,
) -> std::sync::Arc<k8s_openapi::api::core::v1::Pod> {
    std::sync::Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace},
            "status": {"containerStatuses": [{"name": "engine", "image": "vllm", "ready": true,
                "restartCount": 1, "state": {"running": {"startedAt": started}}}]},
        }))
        .unwrap(),
    )
}

/// Go Kthena's fix of stale owners: an owner written at or before its pod's newest container
/// start (the engine restarted and lost its cache) scores nothing; one written after does.
#[test]
fn owners_written_before_the_container_start_are_ignored() {
    let mut conn = redis();
    let model = unique("restart-model");
    let tokens: Vec<u32> = (0..64).collect(); // 4 blocks
    // 2026-01-01T00:00:00Z = 1767225600.
    let started = 1_767_225_600;
    let write = |conn: &mut redis::Connection, owner: &str, at: i64, blocks: usize| {
        for block in tokens.chunks(16).take(blocks) {
            let key = block_key(&model, kthena_block_hash(block));
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg(owner)
                .arg(at)
                .query(conn)
                .unwrap();
            let _: () = redis::cmd("EXPIRE").arg(&key).arg(600).query(conn).unwrap();
        }
    };
    write(&mut conn, "stale.prod", started - 30, 4); // before the restart
    write(&mut conn, "same.prod", started, 4); // in the restart's second
    write(&mut conn, "fresh.prod", started + 1, 2); // after it
    write(&mut conn, "unknown.prod", started - 30, 3); // no pod known: kept
    let view = kthena_router::kv::OwnerView::new();
    view.note_pods(&[
        started_pod("prod", "stale", "2026-01-01T00:00:00Z"),
        started_pod("prod", "same", "2026-01-01T00:00:00Z"),
        started_pod("prod", "fresh", "2026-01-01T00:00:00Z"),
    ]);
    let index = RedisKvIndex::new(REDIS, Duration::from_secs(1))
        .unwrap()
        .with_owners(view);
    let mut hashes = Vec::new();
    token_block_hashes(&tokens, 16, 128, &mut hashes);
    let cands =
        ["prod/stale", "prod/same", "prod/fresh", "prod/unknown"].map(|id| Candidate::new(id, "m"));
    let refs: Vec<&Candidate> = cands.iter().collect();
    let mut out = [9u32; 4];
    let q = KvQuery {
        model: &model,
        token_ids: &tokens,
        block_size: 16,
        block_hashes: &hashes,
    };
    index.match_prefix(&q, &refs, &mut out);
    assert_eq!(out, [0, 0, 2, 3]);
    // The same keys without container starts: every owner counts.
    let blind = RedisKvIndex::new(REDIS, Duration::from_secs(1)).unwrap();
    blind.match_prefix(&q, &refs, &mut out);
    assert_eq!(out, [4, 4, 2, 3]);
}
