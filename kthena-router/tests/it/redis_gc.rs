//! The Redis garbage collection (`kv::redis_gc`) against a real `redis-server` on
//! 127.0.0.1:6379 (started by `scripts/services.sh`), in database 9, which no other test
//! uses: a round sees every block key of its database.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kthena_router::kv::{DELETE_IF_UNCHANGED, GcReport, OwnerView, RedisGc, RedisGcSettings};
use kthena_router::upstream::ON_FLIGHT_KEY;
use tokio::time::Instant;

const DB9: &str = "redis://127.0.0.1:6379/9";

fn redis() -> redis::Connection {
    redis::Client::open(DB9)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("redis-server must listen on 127.0.0.1:6379 (scripts/services.sh starts it)")
}

fn pod(name: &str, started: Option<&str>) -> Arc<Pod> {
    let statuses = started.map_or_else(Vec::new, |t| {
        vec![
            serde_json::json!({"name": "engine", "image": "vllm", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": t}}}),
        ]
    });
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "prod"},
            "status": {"containerStatuses": statuses},
        }))
        .unwrap(),
    )
}

fn hset(c: &mut redis::Connection, key: &str, field: &str, value: &str) {
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg(field)
        .arg(value)
        .query(c)
        .unwrap();
}

fn fields(c: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(c).unwrap()
}

fn gc(view: &Arc<OwnerView>, scan_keys: usize) -> RedisGc {
    let settings = RedisGcSettings {
        blocks_url: Some(DB9.to_owned()),
        in_flight_url: Some(DB9.to_owned()),
        interval: Duration::from_secs(1),
        scan_keys,
        grace: Duration::ZERO,
        timeout: Duration::from_secs(2),
    };
    RedisGc::new(settings, Arc::clone(view), None).unwrap()
}

/// 2026-01-01T00:00:00Z, the time of the rounds; pod "live" started 100 s before.
const NOW: i64 = 1_767_225_600;

fn block(i: u32) -> String {
    format!("matrix:kv:block:m@{i}")
}

/// Writes 252 block keys, 3 hash-mapping keys, an unrelated hash and 2 in-flight fields.
fn seed(c: &mut redis::Connection) {
    let _: () = redis::cmd("FLUSHDB").query(c).unwrap();
    let t = |d: i64| (NOW + d).to_string();
    for i in 0..250 {
        hset(c, &block(i), "live.prod", &t(-10));
    }
    hset(c, &block(0), "dead.prod", &t(-10)); // pod gone
    hset(c, &block(1), "live.prod", &t(-100)); // written in the start's second
    hset(c, &block(1), "idle.prod", &t(-86_401)); // over 24 h old
    hset(c, &block(2), "idle.prod", "not-a-time"); // kept, as Go
    hset(c, &block(300), "live.prod", &t(-200)); // before the restart: key emptied
    hset(c, &block(301), "dead.prod", &t(-5)); // key emptied
    hset(c, "unrelated", "dead.prod", &t(-5)); // not a block key
    // The sidecar's hash-mapping keys: a deleted pod's go, a live pod's stay.
    for key in [
        "vllm:kv:block:dead.prod@11",
        "sglang:kv:block:dead.prod@12",
        "vllm:kv:block:live.prod@13",
    ] {
        let _: () = redis::cmd("SET").arg(key).arg("42").query(c).unwrap();
    }
    hset(c, ON_FLIGHT_KEY, "prod/live", "2");
    hset(c, ON_FLIGHT_KEY, "prod/dead", "3");
}

/// Rounds of `collector` a second apart until one completes a pass.
fn full_pass(collector: &RedisGc) -> Vec<GcReport> {
    let mut rounds: Vec<GcReport> = Vec::new();
    let mut at = Instant::now();
    loop {
        let r = collector.run_round(NOW, at);
        assert!(r.errors.is_empty(), "{r:?}");
        rounds.push(r.clone());
        if r.pass_done {
            return rounds;
        }
        assert!(rounds.len() < 10, "no full pass after 10 rounds");
        at += Duration::from_secs(1);
    }
}

/// The fields removed by `(hash, reason)` and the block keys emptied, over `rounds`.
fn totals(rounds: &[GcReport]) -> (HashMap<(&'static str, &'static str), u64>, u64) {
    let mut removed = HashMap::new();
    let mut keys_removed = 0;
    for r in rounds {
        for (what, n) in &r.removed {
            *removed.entry(*what).or_insert(0) += n;
        }
        keys_removed += r.keys_removed.get("kv_block").copied().unwrap_or(0);
    }
    (removed, keys_removed)
}

/// One full pass deletes exactly the expired, restarted and deleted-pod fields, the
/// hash-mapping keys and in-flight fields of deleted pods; emptied hashes disappear; rounds
/// are bounded by `gcScanKeys`; a second collector (another router) then finds nothing to
/// delete.
#[test]
fn a_pass_deletes_stale_fields_in_bounded_rounds() {
    let mut c = redis();
    seed(&mut c);
    let view = OwnerView::new();
    view.note_pods(&[pod("live", Some("2025-12-31T23:58:20Z")), pod("idle", None)]);
    let rounds = full_pass(&gc(&view, 100));
    let scanned: Vec<u64> = rounds.iter().map(|r| r.scanned).collect();
    eprintln!("keys scanned per round: {scanned:?}");
    // 252 block keys and 3 mapping keys, at most ~100 (SCAN's COUNT, whole buckets) per round;
    // SCAN may return a key twice while Redis resizes its table, never skips one.
    assert!(scanned.len() >= 3 && scanned.iter().all(|n| *n <= 150));
    assert!(scanned.iter().sum::<u64>() >= 255);
    let want: HashMap<(&str, &str), u64> = [
        (("kv_block", "deleted_pod"), 2),
        (("kv_block", "restarted"), 2),
        (("kv_block", "expired"), 1),
        (("in_flight", "deleted_pod"), 1),
        (("kv_mapping", "deleted_pod"), 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(totals(&rounds), (want, 3)); // blocks 1, 300 and 301 emptied

    assert_eq!(fields(&mut c, &block(0)).len(), 1);
    assert!(fields(&mut c, &block(1)).is_empty());
    assert_eq!(fields(&mut c, &block(2)).len(), 2);
    let exists: (bool, bool) = redis::pipe()
        .cmd("EXISTS")
        .arg(block(300))
        .cmd("EXISTS")
        .arg(block(301))
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, (false, false));
    assert_eq!(fields(&mut c, "unrelated").len(), 1);
    let mappings: Vec<String> = redis::cmd("KEYS")
        .arg("*:kv:block:*.prod@*")
        .query(&mut c)
        .unwrap();
    assert_eq!(mappings, ["vllm:kv:block:live.prod@13"]);
    let flight = fields(&mut c, ON_FLIGHT_KEY);
    assert_eq!(flight, [("prod/live".to_owned(), "2".to_owned())].into());

    // Another router's collector, a full pass later: nothing left to delete.
    let r = gc(&view, 1000).run_round(NOW, Instant::now());
    assert!(
        r.pass_done && r.removed.is_empty() && r.errors.is_empty(),
        "{r:?}"
    );
    assert!(r.scanned >= 250, "{r:?}");
}

/// The delete script removes a field only while it holds the value read: a field the
/// sidecar rewrote in between stays; deleting twice deletes nothing.
#[test]
fn deletion_is_conditional_and_idempotent() {
    let mut c = redis();
    let key = format!("gc-script-{}", std::process::id());
    hset(&mut c, &key, "a.prod", "100");
    hset(&mut c, &key, "b.prod", "200");
    let eval = |c: &mut redis::Connection, pairs: &[(&str, &str)]| -> Vec<i64> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DELETE_IF_UNCHANGED).arg(1).arg(&key);
        for (f, v) in pairs {
            cmd.arg(*f).arg(*v);
        }
        cmd.query(c).unwrap()
    };
    // b was rewritten (200 ≠ 150): kept.
    assert_eq!(
        eval(&mut c, &[("a.prod", "100"), ("b.prod", "150")]),
        [1, 1, 0]
    );
    assert_eq!(eval(&mut c, &[("a.prod", "100")]), [1, 0]);
    assert_eq!(eval(&mut c, &[("b.prod", "200")]), [0, 1]);
    let exists: bool = redis::cmd("EXISTS").arg(&key).query(&mut c).unwrap();
    assert!(!exists);
}

/// A collector whose Redis does not answer counts a connect error and deletes nothing.
#[test]
fn an_unreachable_redis_is_an_error_per_round() {
    let settings = RedisGcSettings {
        blocks_url: Some("redis://127.0.0.1:1".to_owned()),
        in_flight_url: None,
        interval: Duration::from_secs(1),
        scan_keys: 100,
        grace: Duration::ZERO,
        timeout: Duration::from_millis(200),
    };
    let gc = RedisGc::new(settings, OwnerView::new(), None).unwrap();
    let r = gc.run_round(1_767_225_600, Instant::now());
    assert_eq!(r.errors, [(("kv_block", "connect"), 1)].into());
    assert_eq!(r.scanned, 0);
}
