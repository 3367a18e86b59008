//! Two routers in front of the same two engines share their per-endpoint in-flight counts through a
//! real Redis (`kthena:on-flight-requests`, Go Kthena's `datastore/on_flight_counter.go`) and
//! balance as one; without Redis, the second router cannot see the first one's streams and piles
//! onto one engine.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use hyper::body::Incoming;
use kthena_router::upstream::ON_FLIGHT_KEY;
use tokio::sync::mpsc;

const REDIS: &str = "redis://127.0.0.1:6379";

fn redis() -> redis::Connection {
    redis::Client::open(REDIS)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("redis-server must listen on 127.0.0.1:6379 (scripts/services.sh starts it)")
}

/// An engine streaming until the client goes away, counting the streams that ended.
struct Engine {
    up: Upstream,
    closed: mpsc::UnboundedReceiver<()>,
    ended: usize,
}

impl Engine {
    async fn start() -> Self {
        let (tx, closed) = mpsc::unbounded_channel();
        let up = Upstream::start(Script::EndlessStream {
            every: Duration::from_millis(50),
            closed: tx,
        })
        .await;
        Self {
            up,
            closed,
            ended: 0,
        }
    }

    /// Streams open now: received minus ended (waits until `want_ended` have ended).
    async fn open(&mut self, want_ended: usize) -> usize {
        while self.ended < want_ended {
            tokio::time::timeout(Duration::from_secs(5), self.closed.recv())
                .await
                .unwrap()
                .unwrap();
            self.ended += 1;
        }
        self.up.bodies.lock().unwrap().len() - self.ended
    }

    /// Which of the requests tagged `tag-<i>` this engine got.
    fn got(&self, tag: &str) -> Vec<usize> {
        self.up
            .bodies
            .lock()
            .unwrap()
            .iter()
            .filter_map(|b| {
                let v: serde_json::Value = serde_json::from_slice(b).ok()?;
                let text = v["messages"][0]["content"].as_str()?;
                text.strip_prefix(tag)?.strip_prefix('-')?.parse().ok()
            })
            .collect()
    }
}

async fn open_stream(r: &TestRouter, text: &str) -> http::Response<Incoming> {
    let url = format!("{}/v1/chat/completions", r.url());
    let resp = post_stream(&url, chat("real-model", text, true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp
}

/// Router A opens 10 streams (5 per engine), the 5 on engine 2 end, then router B opens 10
/// (sharing counts, it sees engine 2 idle and fills it first).
/// Returns the streams open on each engine at the end.
async fn scenario(shared: bool) -> (usize, usize) {
    let (mut e1, mut e2) = (Engine::start().await, Engine::start().await);
    // Field names unique to this run: other tests may share the Redis.
    let tag = format!("{}-{}", std::process::id(), u8::from(shared));
    let (n1, n2) = (format!("ifl-1-{tag}"), format!("ifl-2-{tag}"));
    let endpoints = format!(
        "{}{}",
        endpoint(&n1, e1.up.addr, "demo"),
        endpoint(&n2, e2.up.addr, "demo")
    );
    let env: &[(&str, &str)] = if shared {
        &[("REDIS_HOST", "127.0.0.1"), ("REDIS_PORT", "6379")]
    } else {
        &[]
    };
    let head = format!("metricsScrapeInterval: 1h\n{LEAST_REQUEST_ONLY}");
    let manifests = [
        ("s.yaml", model_server("srv", "real-model", "demo", "")),
        ("r.yaml", simple_route("route", "real-model", "srv")),
    ];
    let a = TestRouter::start_with_env(&head, &endpoints, &manifests, env).await;
    let b = TestRouter::start_with_env(&head, &endpoints, &manifests, env).await;
    a.wait_ready().await;
    b.wait_ready().await;

    let mut first = Vec::new();
    for i in 0..10 {
        first.push(Some(open_stream(&a, &format!("a-{i}")).await));
    }
    assert_eq!((e1.open(0).await, e2.open(0).await), (5, 5));
    for i in e2.got("a") {
        first[i] = None;
    }
    assert_eq!(e2.open(5).await, 0);
    if shared {
        // The decrements reach Redis, and the next refresh (every 50 ms) shows them.
        let field = format!("default/{n2}");
        for _ in 0..100 {
            let v: Option<i64> = redis::cmd("HGET")
                .arg(ON_FLIGHT_KEY)
                .arg(&field)
                .query(&mut redis())
                .unwrap();
            if v == Some(0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut second = Vec::new();
    for i in 0..10 {
        // Apart by more than the refresh interval: each pick sees the previous one.
        tokio::time::sleep(kthena_router::upstream::SYNC_INTERVAL + Duration::from_millis(10))
            .await;
        second.push(open_stream(&b, &format!("b-{i}")).await);
    }
    let open = (e1.open(0).await, e2.open(5).await);
    if shared {
        let mut c = redis();
        let counts: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(ON_FLIGHT_KEY)
            .arg(format!("default/{n1}"))
            .arg(format!("default/{n2}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(counts, [Some(open.0 as i64), Some(open.1 as i64)]);
        drop(first);
        drop(second);
        // Every slot is given back in Redis too.
        for _ in 0..200 {
            let counts: Vec<Option<i64>> = redis::cmd("HMGET")
                .arg(ON_FLIGHT_KEY)
                .arg(format!("default/{n1}"))
                .arg(format!("default/{n2}"))
                .query(&mut c)
                .unwrap();
            if counts == [Some(0), Some(0)] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let counts: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(ON_FLIGHT_KEY)
            .arg(format!("default/{n1}"))
            .arg(format!("default/{n2}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(counts, [Some(0), Some(0)]);
        let _: i64 = redis::cmd("HDEL")
            .arg(ON_FLIGHT_KEY)
            .arg(format!("default/{n1}"))
            .arg(format!("default/{n2}"))
            .query(&mut c)
            .unwrap();
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_sharing_redis_counts_balance_as_one() {
    let (s1, s2) = scenario(true).await;
    let (l1, l2) = scenario(false).await;
    eprintln!("open streams per engine: shared counts {s1}/{s2}, local counts {l1}/{l2}");
    // 15 streams over 2 engines: within ±10% of 7.5 each.
    assert_eq!(s1 + s2, 15);
    assert!((7..=8).contains(&s1) && (7..=8).contains(&s2), "{s1}/{s2}");
    // Baseline from the same run: router B alone cannot see router A's streams.
    assert_eq!((l1, l2), (10, 5));
}
