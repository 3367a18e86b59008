//! Token rate limits over real sockets (router + kthena-sim, the real Redis at
//! 127.0.0.1:6379 for the global variant, keys of models named per test run): the input
//! limit admits exactly what fits, the output limit counts the engine's real
//! `completion_tokens`, two routers sharing Redis keep one budget, and a Redis that goes
//! away leaves each router limiting on its own until it is back.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// A model name of its own for this test run (its Redis keys are nobody else's).
fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond() % 1_000_000_000
    )
}

fn limited_route(model: &str, rate_limit: &str) -> String {
    format!(
        "{}  rateLimit: {rate_limit}\n",
        simple_route(&format!("route-{model}"), model, "srv")
    )
}

async fn start(sim: SocketAddr, models: &[&str], routes: Vec<(String, String)>) -> TestRouter {
    let mut manifests: Vec<(&str, String)> =
        vec![("s.yaml", model_server("srv", models[0], "demo", ""))];
    for (name, text) in &routes {
        manifests.push((name.as_str(), text.clone()));
    }
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim, "demo"),
        &manifests,
    )
    .await;
    r.wait_ready().await;
    r
}

/// A completion request whose prompt is `tokens` estimated tokens (4 characters each).
fn completion(model: &str, tokens: usize, max_tokens: u32, stream: bool) -> String {
    let mut v = serde_json::json!({
        "model": model, "prompt": "abcd".repeat(tokens), "max_tokens": max_tokens,
        "stream": stream,
    });
    if stream {
        v["stream_options"] = serde_json::json!({"include_usage": true});
    }
    v.to_string()
}

/// `(status, error.message or "", Retry-After, completion_tokens)`.
async fn send(url: &str, body: String) -> (StatusCode, String, Option<u64>, u64) {
    let (s, h, b) = post(&format!("{url}/v1/completions"), body, &[]).await;
    let retry = h
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let text = String::from_utf8_lossy(&b);
    let mut completion = 0;
    let mut message = String::new();
    // A JSON answer, or SSE `data:` lines of which one carries the usage.
    for doc in
        std::iter::once(text.as_ref()).chain(text.lines().filter_map(|l| l.strip_prefix("data: ")))
    {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(doc) {
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                completion = n;
            }
            if let Some(m) = v["error"]["message"].as_str() {
                message = m.to_owned();
            }
        }
    }
    (s, message, retry, completion)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_limit_per_minute_admits_exactly_what_fits() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let routes = vec![
        (
            "r.yaml".into(),
            limited_route("m", "{inputTokensPerUnit: 100, unit: minute}"),
        ),
        ("free.yaml".into(), simple_route("free", "free", "srv")),
    ];
    let r = start(sim.addr(), &["m"], routes).await;
    let url = r.url();
    // 10 prompts of 10 tokens fit into 100 per minute; the 11th does not.
    for i in 0..10 {
        let (s, msg, _, _) = send(&url, completion("m", 10, 2, false)).await;
        assert_eq!((s, msg.as_str()), (StatusCode::OK, ""), "request {i}");
    }
    let (s, msg, retry, _) = send(&url, completion("m", 10, 2, false)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(msg, "input token rate limit exceeded");
    // 10 tokens at 100/60 per second.
    assert_eq!(retry, Some(6));
    // Under a second passed: not even 2 tokens are back.
    assert_eq!(
        send(&url, completion("m", 2, 2, false)).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Other models are not limited.
    assert_eq!(
        send(&url, completion("free", 10, 2, false)).await.0,
        StatusCode::OK
    );
    let series = r#"kthena_router_rate_limit_exceeded_total{model="m",limit_type="input_tokens",path="/v1/completions"}"#;
    assert_eq!(r.metric(series).await, 2.0);
    let log = r.access_log();
    let limited: Vec<_> = log.iter().filter(|l| l["status_code"] == 429).collect();
    assert_eq!(limited.len(), 2);
    assert_eq!(limited[0]["error"]["type"], "input_rate_limit");
    assert_eq!(
        limited[0]["error"]["message"],
        "input token rate limit exceeded"
    );
    r.router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_limit_counts_the_engines_completion_tokens() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let routes = vec![(
        "r.yaml".into(),
        limited_route("m", "{outputTokensPerUnit: 50, unit: hour}"),
    )];
    let r = start(sim.addr(), &["m"], routes).await;
    let url = r.url();
    // A request is admitted while the bucket holds its max_tokens (20); each answer's real
    // completion_tokens (streamed or not) settle the reservation when it ends.
    let mut spent = 0;
    let mut admitted = 0;
    for i in 0..10 {
        let (s, msg, retry, completion) = send(&url, completion("m", 1, 20, i % 2 == 1)).await;
        if 50 - spent >= 20 {
            assert_eq!(
                (s, msg.as_str()),
                (StatusCode::OK, ""),
                "request {i}, {spent} spent"
            );
            assert!(completion > 0, "request {i}: the engine reports usage");
            spent += completion;
            admitted += 1;
        } else {
            assert_eq!(
                s,
                StatusCode::TOO_MANY_REQUESTS,
                "request {i}, {spent} spent"
            );
            assert_eq!(msg, "output token rate limit exceeded");
            // The tokens missing for 20 at 50 per hour (72 s each), rounded up.
            let want = (20 - (50 - spent)) * 72;
            assert!(
                retry.is_some_and(|s| s.abs_diff(want) <= 1),
                "{retry:?} {want}"
            );
            break;
        }
    }
    assert!(
        spent > 30,
        "the limit was reached ({spent} tokens in {admitted} answers)"
    );
    assert!(admitted >= 2, "{admitted}");
    let series = r#"kthena_router_rate_limit_exceeded_total{model="m",limit_type="output_tokens",path="/v1/completions"}"#;
    assert_eq!(r.metric(series).await, 1.0);
    r.router.shutdown().await;
}

fn redis() -> redis::Connection {
    redis::Client::open("redis://127.0.0.1:6379/")
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("a Redis on 127.0.0.1:6379 (scripts/services.sh starts one)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_sharing_redis_keep_one_global_budget() {
    let model = unique("rl-global");
    let key = format!("kthena:ratelimit:{model}:input");
    let sim = kthena_sim::spawn(sim_config(&model)).await.unwrap();
    let spec =
        "{inputTokensPerUnit: 100, unit: hour, global: {redis: {address: \"127.0.0.1:6379\"}}}";
    let routes = || vec![("r.yaml".to_owned(), limited_route(&model, spec))];
    let a = start(sim.addr(), &[&model], routes()).await;
    let b = start(sim.addr(), &[&model], routes()).await;
    // 30 prompts of 10 tokens at once, half through each router: 10 fit into 100.
    let mut tasks = JoinSet::new();
    for i in 0..30 {
        let url = if i % 2 == 0 { a.url() } else { b.url() };
        let body = completion(&model, 10, 2, false);
        tasks.spawn(async move { send(&url, body).await });
    }
    let mut ok = 0;
    let mut limited = 0;
    while let Some(t) = tasks.join_next().await {
        let (s, msg, _, _) = t.unwrap();
        match s {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(msg, "input token rate limit exceeded");
                limited += 1;
            }
            other => panic!("unexpected {other}: {msg}"),
        }
    }
    assert_eq!((ok, limited), (10, 20));
    // Go's hash: fields `tokens` and `last_update`, an expiry of 3 hours.
    let mut conn = redis();
    let (tokens, last): (f64, f64) = redis::cmd("HMGET")
        .arg(&key)
        .arg("tokens")
        .arg("last_update")
        .query(&mut conn)
        .unwrap();
    assert!((0.0..1.0).contains(&tokens), "{tokens}");
    assert!(last > 1.7e9, "{last}");
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut conn).unwrap();
    assert!((10_000..=10_800).contains(&ttl), "{ttl}");
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
    a.router.shutdown().await;
    b.router.shutdown().await;
}

/// A TCP relay to the real Redis that can be cut (every connection closed) and brought back.
struct Relay {
    addr: SocketAddr,
    tasks: Arc<Mutex<JoinSet<()>>>,
}

impl Relay {
    async fn start(addr: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks: Arc<Mutex<JoinSet<()>>> = Arc::default();
        let t2 = Arc::clone(&tasks);
        tasks.lock().unwrap().spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                t2.lock().unwrap().spawn(async move {
                    let mut up = tokio::net::TcpStream::connect("127.0.0.1:6379")
                        .await
                        .unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                });
            }
        });
        Self { addr, tasks }
    }

    /// Closes the listener and every relayed connection.
    fn cut(&self) {
        self.tasks.lock().unwrap().abort_all();
    }
}

/// Redis going away: the router limits on its own bucket (served, never hanging, a silent
/// Redis costs one 1 s timeout), and shares the Redis bucket again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_limits_per_router_and_shares_again_when_back() {
    let model = unique("rl-outage");
    let key = format!("kthena:ratelimit:{model}:input");
    let relay = Relay::start("127.0.0.1:0".parse().unwrap()).await;
    let sim = kthena_sim::spawn(sim_config(&model)).await.unwrap();
    let spec = format!(
        "{{inputTokensPerUnit: 1000, unit: hour, global: {{redis: {{address: \"{}\"}}}}}}",
        relay.addr
    );
    let r = start(
        sim.addr(),
        &[&model],
        vec![("r.yaml".into(), limited_route(&model, &spec))],
    )
    .await;
    let url = r.url();
    assert_eq!(
        send(&url, completion(&model, 10, 2, false)).await.0,
        StatusCode::OK
    );

    // Redis goes away (connections reset, nothing listening): served at once on the
    // router's own bucket.
    relay.cut();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..2 {
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            send(&url, completion(&model, 10, 2, false)),
        )
        .await
        .expect("no hang while Redis is away");
        assert_eq!(answer.0, StatusCode::OK);
    }
    // A Redis that accepts but never answers: served after at most one 1 s timeout.
    let silent = TcpListener::bind(relay.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        send(&url, completion(&model, 10, 2, false)),
    )
    .await
    .expect("no hang on a silent Redis");
    assert_eq!(answer.0, StatusCode::OK);
    drop(silent);

    // Redis is back: within the 1 s retry, requests are charged there again, on the budget
    // it kept (the outage's charges stayed with the router).
    let relay = Relay::start(relay.addr).await;
    let mut conn = redis();
    let mut tokens = 990.0;
    for _ in 0..40 {
        assert_eq!(
            send(&url, completion(&model, 10, 2, false)).await.0,
            StatusCode::OK
        );
        tokens = redis::cmd("HGET")
            .arg(&key)
            .arg("tokens")
            .query(&mut conn)
            .unwrap();
        if tokens < 989.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        (980.0..982.0).contains(&tokens),
        "one prompt of 10 before and one after: {tokens}"
    );
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
    relay.cut();
    r.router.shutdown().await;
}

/// An engine that streams one chunk with `usage` and then holds the stream open until the
/// test ends.
async fn usage_then_hold(completion_tokens: u64, server: &mut JoinSet<()>) -> SocketAddr {
    use futures_util::StreamExt;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::{Frame, Incoming};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            conns.spawn(async move {
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| async move {
                    let post = req.method() == http::Method::POST;
                    let chunk = format!(
                        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{completion_tokens}}}}}\n\n"
                    );
                    let frame = Ok::<_, std::convert::Infallible>(Frame::data(bytes::Bytes::from(chunk)));
                    let frames = if post {
                        futures_util::stream::iter([frame])
                            .chain(futures_util::stream::pending())
                            .boxed()
                    } else {
                        futures_util::stream::empty().boxed()
                    };
                    let mut resp = http::Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
                    if post {
                        resp.headers_mut()
                            .insert("content-type", "text/event-stream".parse().unwrap());
                    }
                    Ok::<_, std::convert::Infallible>(resp)
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_usage_chunk_is_charged_before_the_stream_ends() {
    use futures_util::StreamExt as _;
    let mut server = JoinSet::new();
    let engine = usage_then_hold(60, &mut server).await;
    let routes = vec![(
        "r.yaml".into(),
        limited_route("m", "{outputTokensPerUnit: 50, unit: hour}"),
    )];
    let r = start(engine, &["m"], routes).await;
    let url = format!("{}/v1/completions", r.url());
    let first = post_stream(&url, completion("m", 1, 100, true), &[]).await;
    assert_eq!(first.status(), StatusCode::OK);
    // Read until the usage chunk has come through; the stream stays open.
    let mut body = http_body_util::BodyDataStream::new(first.into_body());
    let chunk = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&chunk).contains("\"completion_tokens\":60"));
    // Without the early charge this request would be admitted and held open too.
    let base = r.url();
    let second = send(&base, completion("m", 1, 100, true));
    let (s, msg, _, _) = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the second request is refused, not admitted");
    assert_eq!(
        (s, msg.as_str()),
        (
            StatusCode::TOO_MANY_REQUESTS,
            "output token rate limit exceeded"
        )
    );
    drop(body);
    r.router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_output_limit_charges_redis_with_the_engines_completion_tokens() {
    let model = unique("rl-global-out");
    let key = format!("kthena:ratelimit:{model}:output");
    let sim = kthena_sim::spawn(sim_config(&model)).await.unwrap();
    let spec =
        "{outputTokensPerUnit: 1000, unit: hour, global: {redis: {address: \"127.0.0.1:6379\"}}}";
    let r = start(
        sim.addr(),
        &[&model],
        vec![("r.yaml".into(), limited_route(&model, spec))],
    )
    .await;
    let (s, _, _, completion) = send(&r.url(), completion(&model, 1, 20, true)).await;
    assert_eq!(s, StatusCode::OK);
    assert!(completion > 0);
    // The charge goes to Redis in the background: wait for it (bounded).
    let mut conn = redis();
    let mut tokens = 1000.0;
    for _ in 0..100 {
        let v: Option<f64> = redis::cmd("HGET")
            .arg(&key)
            .arg("tokens")
            .query(&mut conn)
            .unwrap();
        tokens = v.unwrap_or(1000.0);
        if tokens < 999.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let want = 1000.0 - completion as f64;
    assert!(
        (want..want + 1.0).contains(&tokens),
        "{tokens}, {completion} charged"
    );
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
    r.router.shutdown().await;
}

/// A bucket left in Redis by a Go Kthena router (hash fields `tokens` and `last_update` from
/// Redis `TIME`) is the same budget for this router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_written_by_a_go_router_is_shared() {
    let model = unique("rl-go");
    let key = format!("kthena:ratelimit:{model}:input");
    let mut conn = redis();
    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now = format!("{secs}.{micros:0>6}");
    let _: i64 = redis::cmd("HSET")
        .arg(&key)
        .arg("tokens")
        .arg("50")
        .arg("last_update")
        .arg(&now)
        .query(&mut conn)
        .unwrap();
    let sim = kthena_sim::spawn(sim_config(&model)).await.unwrap();
    let spec =
        "{inputTokensPerUnit: 100, unit: hour, global: {redis: {address: \"127.0.0.1:6379\"}}}";
    let r = start(
        sim.addr(),
        &[&model],
        vec![("r.yaml".into(), limited_route(&model, spec))],
    )
    .await;
    let mut ok = 0;
    for _ in 0..8 {
        if send(&r.url(), completion(&model, 10, 2, false)).await.0 == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 5, "50 tokens left by the other router, 10 per request");
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
    r.router.shutdown().await;
}

/// A client that leaves mid-stream, before the usage chunk, is still charged what it was
/// streamed (one token per event): leaving early is no way around the output limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_is_charged_what_it_was_streamed() {
    use http_body_util::BodyExt as _;
    let sim = kthena_sim::spawn(sim_config("m").with_time_scale(1.0))
        .await
        .unwrap();
    let routes = vec![(
        "r.yaml".into(),
        limited_route("m", "{outputTokensPerUnit: 50, unit: hour}"),
    )];
    let r = start(sim.addr(), &["m"], routes).await;
    let url = format!("{}/v1/completions", r.url());
    let resp = post_stream(&url, completion("m", 1, 1000, true), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut seen = Vec::new();
    while seen.windows(6).filter(|w| w == b"data: ").count() < 55 {
        let frame = body.frame().await.unwrap().unwrap();
        seen.extend_from_slice(frame.data_ref().unwrap());
    }
    drop(body);
    // The access-log line is written when the request is settled and charged.
    let mut line = None;
    for _ in 0..250 {
        if let Some(l) = r.access_log().into_iter().next() {
            line = Some(l);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line = line.expect("an access-log line for the abandoned stream");
    assert_eq!(line["error"]["type"], "client_disconnect");
    let charged = line["output_tokens"].as_u64().unwrap();
    assert!((55..1000).contains(&charged), "{line}");
    let (s, msg, _, _) = send(&r.url(), completion("m", 1, 5, false)).await;
    assert_eq!(
        (s, msg.as_str()),
        (
            StatusCode::TOO_MANY_REQUESTS,
            "output token rate limit exceeded"
        )
    );
    r.router.shutdown().await;
}
