//! Fault: the Redis behind global token rate limits and shared in-flight counts restarts
//! under load (a redis-server of the test's own on a private port, killed and started
//! again). The router keeps serving while it is down (rate limits fall back to per-router
//! buckets, in-flight counts to the router's own) and shares both again once it is back;
//! the test prints the measured recovery times.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use kthena_router::upstream::ON_FLIGHT_KEY;
use tokio::time::Instant;

const MODEL: &str = "m";
const FIELD: &str = "default/sim-a";
const BUCKET: &str = "kthena:ratelimit:m:input";

/// A redis-server of this test, killed when dropped (also when the test fails).
struct Server(Child);

impl Server {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A redis-server of this test on `port`, without persistence, answering `PING`.
fn redis_server(port: u16, dir: &std::path::Path) -> Server {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--dir", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let child = Server(child);
    let deadline = Instant::now() + Duration::from_secs(5);
    while redis_at(port).is_none() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn redis_at(port: u16) -> Option<redis::Connection> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .ok()?
        .get_connection_with_timeout(Duration::from_millis(200))
        .ok()?;
    redis::cmd("PING").query::<String>(&mut c).ok()?;
    Some(c)
}

fn in_flight(c: &mut redis::Connection) -> Option<i64> {
    redis::cmd("HGET")
        .arg(ON_FLIGHT_KEY)
        .arg(FIELD)
        .query(c)
        .unwrap()
}

fn bucket(c: &mut redis::Connection) -> Option<f64> {
    redis::cmd("HGET")
        .arg(BUCKET)
        .arg("tokens")
        .query(c)
        .unwrap()
}

async fn completion(url: &str) -> (StatusCode, Duration) {
    let body = serde_json::json!({"model": MODEL, "prompt": "abcd".repeat(10), "max_tokens": 2});
    let t = Instant::now();
    let (s, _, _) = post(&format!("{url}/v1/completions"), body.to_string(), &[]).await;
    (s, t.elapsed())
}

/// A stream that lasts (2,000 tokens at real time), held open until dropped.
async fn long_stream(url: &str) -> http::Response<hyper::body::Incoming> {
    let body = serde_json::json!({
        "model": MODEL, "prompt": "hi", "max_tokens": 2_000, "stream": true,
    });
    let resp = post_stream(&format!("{url}/v1/completions"), body.to_string(), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp
}

/// Polls `f` every 20 ms until it holds (at most `limit`); the time it took.
async fn until(limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_under_rate_limits_and_shared_in_flight_counts() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = redis_server(port, dir.path());
    let sim = kthena_sim::spawn(sim_config(MODEL).with_time_scale(1.0))
        .await
        .unwrap();
    let route = format!(
        "{}  rateLimit: {{inputTokensPerUnit: 100000, unit: hour, global: {{redis: {{address: \"127.0.0.1:{port}\"}}}}}}\n",
        simple_route("route-m", MODEL, "srv")
    );
    let port_s = port.to_string();
    let r = TestRouter::start_with_env(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", MODEL, "demo", "")),
            ("r.yaml", route),
        ],
        &[("REDIS_HOST", "127.0.0.1"), ("REDIS_PORT", &port_s)],
    )
    .await;
    r.wait_ready().await;
    let url = r.url();

    // Up: the bucket and the count are in Redis.
    assert_eq!(completion(&url).await.0, StatusCode::OK);
    let mut c = redis_at(port).unwrap();
    let tokens = bucket(&mut c).unwrap();
    assert!((99_990.0..99_991.0).contains(&tokens), "{tokens}");
    let held = long_stream(&url).await;
    until(Duration::from_secs(2), || in_flight(&mut c) == Some(1)).await;

    // Down (killed): every request is served, none waits for a timeout.
    server.kill();
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let (s, took) = completion(&url).await;
        assert_eq!(s, StatusCode::OK);
        slowest = slowest.max(took);
    }
    let during = long_stream(&url).await;
    drop(held);
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");

    // Back (empty, as a Redis without persistence restarts): the next requests are
    // charged in Redis and counted there again.
    let mut server = redis_server(port, dir.path());
    let back = Instant::now();
    let mut c = redis_at(port).unwrap();
    let mut rl_shared = None;
    let mut streams = vec![during];
    while rl_shared.is_none() {
        assert_eq!(completion(&url).await.0, StatusCode::OK);
        if bucket(&mut c).is_some() {
            rl_shared = Some(back.elapsed());
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "rate limit not shared again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut if_shared = None;
    while if_shared.is_none() {
        streams.push(long_stream(&url).await);
        if in_flight(&mut c).is_some_and(|n| n >= 1) {
            if_shared = Some(back.elapsed());
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "in-flight not shared again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (rl_shared, if_shared) = (rl_shared.unwrap(), if_shared.unwrap());
    eprintln!(
        "redis restart: slowest request while down {slowest:?}; shared again after \
         {rl_shared:?} (rate limit), {if_shared:?} (in-flight counts)"
    );
    // Every stream ends: the shared count comes back to 0, never below.
    drop(streams);
    until(Duration::from_secs(3), || in_flight(&mut c) == Some(0)).await;
    r.router.shutdown().await;
    server.kill();
}
