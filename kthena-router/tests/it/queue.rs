//! The fairness and session-boost queues over real sockets (router + kthena-sim or a
//! scripted engine): a light user waits less than a heavy one by the ratio of their usage,
//! a follow-up turn of a just-completed session overtakes queued first turns, a queue
//! timeout answers 504, and a client that leaves while queued never reaches the engine.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

fn manifests() -> Vec<(&'static str, String)> {
    vec![
        ("s.yaml", model_server("srv", "real-model", "demo", "")),
        ("r.yaml", simple_route("route", "real-model", "srv")),
    ]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One user's closed loop: `clients` clients each send `prompt` until `until`.
async fn user_loop(
    url: String,
    user: &'static str,
    prompt: String,
    clients: usize,
    until: Instant,
) {
    let tracker = TaskTracker::new();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, prompt) = (url.clone(), prompt.clone());
        tasks.push(tracker.spawn(async move {
            let mut n = 0;
            while Instant::now() < until {
                let body = serde_json::json!({
                    "model": "real-model",
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": 8,
                    "user": user,
                })
                .to_string();
                let id = format!("{user}-{c}-{n}");
                let (status, _, _) = post(&url, body, &[("x-request-id", &id)]).await;
                assert_eq!(status, StatusCode::OK);
                n += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_user_waits_less_than_a_heavy_one_by_their_usage_ratio() {
    let sim = kthena_sim::spawn(
        kthena_sim::Config::default()
            .with_ephemeral_port()
            .with_model("real-model")
            .with_time_scale(20.0),
    )
    .await
    .unwrap();
    let r = TestRouter::start_with_env(
        "metricsScrapeInterval: 1h",
        &endpoint("sim-a", sim.addr(), "demo"),
        &manifests(),
        &[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("FAIRNESS_MAX_CONCURRENT", "1"),
            // Usage = input tokens only: the ratio of the two users' costs is exact.
            ("FAIRNESS_OUTPUT_TOKEN_WEIGHT", "0"),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    let until = Instant::now() + Duration::from_secs(4);
    let heavy = user_loop(url.clone(), "heavy", "h".repeat(1600), 4, until);
    let light = user_loop(url, "light", "l".repeat(400), 4, until);
    tokio::join!(heavy, light);

    let log = r.access_log();
    let of = |user: &str| -> Vec<&serde_json::Value> {
        log.iter()
            .filter(|l| l["request_id"].as_str().unwrap().starts_with(user))
            .collect()
    };
    let (h, l) = (of("heavy-"), of("light-"));
    // The weights make one heavy request cost this many light ones.
    let cost = |v: &[&serde_json::Value]| v[0]["input_tokens"].as_f64().unwrap();
    let ratio = cost(&h) / cost(&l);
    let wait = |v: &[&serde_json::Value]| {
        median(
            v.iter()
                .map(|x| x["duration_request_processing"].as_f64().unwrap())
                .collect(),
        )
    };
    let (wh, wl) = (wait(&h), wait(&l));
    eprintln!(
        "heavy: {} requests, median wait {wh} ms; light: {} requests, median wait {wl} ms; \
         cost ratio {ratio:.2}, wait ratio {:.2}",
        h.len(),
        l.len(),
        wh / wl.max(1.0)
    );
    assert!(ratio > 3.0, "{ratio}");
    assert!(
        wh >= ratio * wl,
        "heavy median wait {wh} ms, light {wl} ms, ratio {ratio}"
    );
    // Served in proportion to the usage: the light user got about `ratio` times as many.
    assert!(
        l.len() as f64 >= 0.8 * ratio * h.len() as f64,
        "{} vs {}",
        l.len(),
        h.len()
    );
    assert_eq!(
        r.metric("kthena_router_fairness_queue_size{model=\"real-model\",user_id=\"_all\"}")
            .await,
        0.0
    );
    assert_eq!(
        r.metric("kthena_router_fairness_queue_inflight{model=\"real-model\"}")
            .await,
        0.0
    );
}

/// A streaming request whose body is not read: it holds its queue slot until dropped.
async fn blocker(url: &str, headers: &[(&str, &str)]) -> http::Response<hyper::body::Incoming> {
    let resp = post_stream(url, chat("real-model", "block", true, 20_000), headers).await;
    assert_eq!(resp.status(), StatusCode::OK);
    resp
}

async fn wait_metric(r: &TestRouter, series: &str, want: f64) {
    for _ in 0..500 {
        if r.metric(series).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{series} never reached {want}: {}", r.metric(series).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_turn_overtakes_queued_first_turns() {
    // Real time: the blocker's stream lasts minutes, the short turns ~100 ms.
    let sim = kthena_sim::spawn(
        kthena_sim::Config::default()
            .with_ephemeral_port()
            .with_model("real-model"),
    )
    .await
    .unwrap();
    let r = TestRouter::start_with_env(
        "metricsScrapeInterval: 1h",
        &endpoint("sim-a", sim.addr(), "demo"),
        &manifests(),
        &[
            ("ENABLE_SESSION_BOOST", "true"),
            ("SESSION_BOOST_INFLIGHT_PER_POD", "1"),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    // The first turn of session `chat-1` completes.
    let (s, _, _) = post(
        &url,
        chat("real-model", "turn 1", false, 4),
        &[("x-session-id", "chat-1")],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let hold = blocker(&url, &[("x-session-id", "blocker")]).await;
    let size = "kthena_router_session_boost_queue_size{model=\"real-model\"}";
    let (tx, mut rx) = mpsc::unbounded_channel();
    let tracker = TaskTracker::new();
    let mut tasks = Vec::new();
    for (i, session) in ["new-1", "new-2", "new-3", "chat-1"]
        .into_iter()
        .enumerate()
    {
        let (url, tx) = (url.clone(), tx.clone());
        tasks.push(tracker.spawn(async move {
            let (s, _, _) = post(
                &url,
                chat("real-model", "next", false, 4),
                &[("x-session-id", session)],
            )
            .await;
            assert_eq!(s, StatusCode::OK);
            tx.send(session).unwrap();
        }));
        wait_metric(&r, size, (i + 1) as f64).await;
    }
    drop(hold);
    for t in tasks {
        t.await.unwrap();
    }
    let mut order = Vec::new();
    while let Ok(s) = rx.try_recv() {
        order.push(s);
    }
    assert_eq!(order, ["chat-1", "new-1", "new-2", "new-3"]);
    assert_eq!(
        r.metric("kthena_router_session_boost_queue_dequeue_total{model=\"real-model\"}")
            .await,
        6.0
    );
    wait_metric(
        &r,
        "kthena_router_session_boost_queue_inflight{model=\"real-model\"}",
        0.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_timeout_is_504_and_a_client_that_left_never_reaches_the_engine() {
    let (closed, _closed_rx) = mpsc::unbounded_channel();
    let up = Upstream::start(Script::EndlessStream {
        every: Duration::from_millis(20),
        closed,
    })
    .await;
    let r = TestRouter::start_with_env(
        "metricsScrapeInterval: 1h",
        &endpoint("up", up.addr, "demo"),
        &manifests(),
        &[
            ("ENABLE_FAIRNESS_SCHEDULING", "true"),
            ("FAIRNESS_MAX_CONCURRENT", "1"),
            ("FAIRNESS_QUEUE_TIMEOUT", "300ms"),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/chat/completions", r.url());
    let hold = blocker(&url, &[]).await;
    // Timeout.
    let (status, _, body) = post(&url, chat("real-model", "late", false, 4), &[]).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["error"]["message"],
        "Request processing timed out in queue"
    );
    assert_eq!(v["error"]["code"], "queue_timeout");
    // A client that sends its request and goes away while it waits.
    let mut sock = tokio::net::TcpStream::connect(r.router.addr).await.unwrap();
    let body = chat("real-model", "gone", false, 4);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-request-id: gone\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(body.as_bytes()).await.unwrap();
    let size = "kthena_router_fairness_queue_size{model=\"real-model\",user_id=\"_all\"}";
    // The timed-out entry stays until its turn comes: two entries, one alive.
    wait_metric(&r, size, 2.0).await;
    drop(sock);
    let mut logged = false;
    for _ in 0..200 {
        if r.access_log().iter().any(|l| l["request_id"] == "gone") {
            logged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(logged, "the router noticed the client leaving");
    // The slot comes back: a new request is served, the one that left never was.
    drop(hold);
    let resp = post_stream(&url, chat("real-model", "after", true, 4), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let _ = body.frame().await;
    drop(body);
    let sent = up.bodies.lock().unwrap().len();
    assert_eq!(sent, 2, "the blocker and the last request only");
    let log = r.access_log();
    let gone = log.iter().find(|l| l["request_id"] == "gone").unwrap();
    assert_eq!(gone["status_code"], 503);
    assert_eq!(
        gone["error"]["message"],
        "Client disconnected while waiting in queue"
    );
    assert!(
        gone["selected_pod"].as_str().unwrap_or("").is_empty(),
        "{gone}"
    );
    let late = log.iter().find(|l| l["status_code"] == 504).unwrap();
    assert_eq!(late["error"]["type"], "queue_timeout");
    assert_eq!(
        r.metric("kthena_router_fairness_queue_cancelled_total{model=\"real-model\",user_id=\"\"}")
            .await,
        2.0
    );
}
