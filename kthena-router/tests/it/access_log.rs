//! What the access log covers: one line per `/v1/*` request (answered by an engine, by the
//! router's own error, or the model list), none for other paths; and the `error_origin` of
//! router-side failures.

use crate::common::*;
use http::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_log_covers_v1_requests_only_with_origins() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms\ncoldStart: {enabled: false}",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("empty.yaml", model_server("nobody", "m", "none", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
            ("r2.yaml", simple_route("route2", "orphan", "nobody")),
            ("r3.yaml", simple_route("route3", "ghost", "missing")),
        ],
    )
    .await;
    r.wait_ready().await;
    let base = r.url();
    let chat_url = format!("{base}/v1/chat/completions");
    let no_ready = r#"kthena_router_requests_total{model="orphan",path="/v1/chat/completions",status_code="503",error_type="pod_discovery",model_route="default/route2",backend_type="model_server",backend_name="default/nobody",upstream_model="m"}"#;

    let cases: Vec<(&str, String, u16)> = vec![
        ("/v1/chat/completions", chat("m", "hi", false, 2), 200),
        ("/v1/chat/completions", chat("orphan", "hi", false, 2), 503),
        ("/v1/chat/completions", chat("ghost", "hi", false, 2), 404),
        ("/v1/chat/completions", "{not json".into(), 400),
        (
            "/v1/embeddings",
            r#"{"model":"ghost-embed","input":"x"}"#.into(),
            404,
        ),
        // Not under /v1/: answered, never logged.
        ("/chat/completions", chat("m", "hi", false, 2), 404),
    ];
    for (path, body, status) in &cases {
        let (s, _, b) = post(&format!("{base}{path}"), body.clone(), &[]).await;
        assert_eq!(
            s.as_u16(),
            *status,
            "{path}: {}",
            String::from_utf8_lossy(&b)
        );
    }
    for (path, status) in [
        ("/v1/models", StatusCode::OK),
        ("/models", StatusCode::OK),
        ("/healthz", StatusCode::OK),
        ("/readyz", StatusCode::OK),
        ("/nope", StatusCode::NOT_FOUND),
    ] {
        assert_eq!(get(&format!("{base}{path}")).await.0, status, "{path}");
    }
    assert_eq!(r.metric(no_ready).await, 1.0);
    assert!(get(&chat_url).await.0.is_client_error());

    let log = r.access_log();
    let seen: Vec<(String, String, u64, String, String)> = log
        .iter()
        .map(|e| {
            (
                e["method"].as_str().unwrap().to_owned(),
                e["path"].as_str().unwrap().to_owned(),
                e["status_code"].as_u64().unwrap(),
                e["error"]["type"].as_str().unwrap_or("").to_owned(),
                e["error_origin"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let want = [
        ("POST", "/v1/chat/completions", 200, "", ""),
        // No ready endpoint is the router's view of its engines, not an engine's answer.
        (
            "POST",
            "/v1/chat/completions",
            503,
            "pod_discovery",
            "internal",
        ),
        (
            "POST",
            "/v1/chat/completions",
            404,
            "pod_discovery",
            "internal",
        ),
        (
            "POST",
            "/v1/chat/completions",
            400,
            "request_parsing",
            "downstream",
        ),
        (
            "POST",
            "/v1/embeddings",
            404,
            "route_not_found",
            "downstream",
        ),
        ("GET", "/v1/models", 200, "", ""),
        (
            "GET",
            "/v1/chat/completions",
            405,
            "request_protocol",
            "downstream",
        ),
    ];
    let want: Vec<(String, String, u64, String, String)> = want
        .iter()
        .map(|(m, p, s, t, o)| ((*m).into(), (*p).into(), *s, (*t).into(), (*o).into()))
        .collect();
    assert_eq!(seen, want);
    r.router.shutdown().await;
}

/// `/v1/responses` goes through the router to kthena-sim, non-streaming and streaming; the
/// access log reads the Responses API usage (`input_tokens`, `output_tokens`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_api_through_the_router() {
    let sim = kthena_sim::spawn(sim_config("real-model")).await.unwrap();
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim.addr(), "demo"),
        &[
            ("s.yaml", model_server("srv", "real-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let url = format!("{}/v1/responses", r.url());
    let (s, _, b) = post(
        &url,
        r#"{"model":"public","input":"hello","max_output_tokens":3}"#,
        &[],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["model"], "real-model");
    assert_eq!(v["usage"]["output_tokens"], 3);

    let (s, h, b) = post(
        &url,
        r#"{"model":"public","input":"hello","max_output_tokens":2,"stream":true}"#,
        &[],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = String::from_utf8_lossy(&b);
    assert!(
        text.starts_with("event: response.created\ndata: "),
        "{text}"
    );
    assert!(text.contains("event: response.completed\n"), "{text}");
    assert_eq!(
        text.matches("event: response.output_text.delta\n").count(),
        2
    );

    let log = r.access_log();
    assert_eq!(log.len(), 2);
    for (e, out) in log.iter().zip([3, 2]) {
        assert_eq!(e["path"], "/v1/responses");
        assert_eq!(e["status_code"], 200);
        assert_eq!(e["output_tokens"], out);
        assert!(e["input_tokens"].as_u64().unwrap() > 0);
    }
    r.router.shutdown().await;
}

/// When every attempt fails to connect, the 503 says why in words a person reads (endpoint,
/// address, the OS reason), never a library's debug dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_upstream_message_is_readable() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let r = TestRouter::start(
        "metricsScrapeInterval: 1h",
        &endpoint("dead-0", dead_addr, "x"),
        &[
            ("s.yaml", model_server("srv", "m", "x", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    let (status, _, body) = post(
        &format!("{}/v1/chat/completions", r.url()),
        chat("m", "hi", false, 2),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "upstream_unavailable");
    let msg = v["error"]["message"].as_str().unwrap();
    let reason =
        format!("dead-0 ({dead_addr}): tcp connect error: Connection refused (os error 111)");
    assert!(msg.ends_with(&reason), "{msg}");
    assert!(
        !msg.contains("hyper_util") && !msg.contains("ConnectError"),
        "{msg}"
    );
    r.router.shutdown().await;
}

/// Regression: the access log was written on the request path, under a lock, so an output
/// that stopped taking lines (a full stdout pipe whose reader stalls, a stuck disk) stalled
/// every request once its buffer filled. Now requests go on while the output takes nothing,
/// and once it is read again every line arrives, none dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_access_log_output_stalls_no_request_and_loses_no_line() {
    const REQUESTS: usize = 1_600;
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("access.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // The reader opens the pipe (the router's open waits for it) and reads nothing yet: the
    // pipe holds 64 KiB, a few hundred lines.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::File::open(fifo).unwrap())
    };
    let mdir = dir.path().join("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    std::fs::write(mdir.join("s.yaml"), model_server("srv", "m", "demo", "")).unwrap();
    std::fs::write(mdir.join("r.yaml"), simple_route("route", "m", "srv")).unwrap();
    let cfg = dir.path().join("router.yaml");
    std::fs::write(
        &cfg,
        format!(
            "accessLog: {{format: json, output: \"{}\"}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{}",
            fifo.display(),
            endpoint("sim-a", sim.addr(), "demo")
        ),
    )
    .unwrap();
    let router = start_router_at(&cfg).await;
    let reader = reader.join().unwrap();
    for _ in 0..200 {
        if get(&format!("http://{}/readyz", router.addr)).await.0 == StatusCode::OK {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let url = format!("http://{}/v1/chat/completions", router.addr);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = url.clone();
        workers.spawn(async move {
            let mut ok = 0;
            for _ in 0..REQUESTS / 8 {
                let sent = post(&url, chat("m", "hi", false, 2), &[]);
                let (status, _, _) = tokio::time::timeout(std::time::Duration::from_secs(10), sent)
                    .await
                    .expect("a request stalled behind the access log");
                ok += usize::from(status == StatusCode::OK);
            }
            ok
        });
    }
    let mut ok = 0;
    while let Some(n) = workers.join_next().await {
        ok += n.unwrap();
    }
    assert_eq!(ok, REQUESTS);
    // Now the pipe is read: every line comes, in the log's JSON.
    let lines = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(reader)
            .lines()
            .take(REQUESTS)
            .map(|l| serde_json::from_str::<serde_json::Value>(&l.unwrap()).unwrap())
            .collect::<Vec<_>>()
    });
    let lines = tokio::time::timeout(std::time::Duration::from_secs(30), lines)
        .await
        .expect("the access log lines never came")
        .unwrap();
    assert_eq!(lines.len(), REQUESTS);
    assert!(
        lines
            .iter()
            .all(|l| l["status_code"] == 200 && l["model_name"] == "m")
    );
    let (_, metrics) = get(&format!("http://{}/metrics", router.metrics_addr)).await;
    assert!(
        metrics.contains("\nkthena_router_access_log_dropped_total 0\n"),
        "{metrics}"
    );
    router.shutdown().await;
}
