use super::*;

/// Regression: with an output that took nothing, shutdown waited 5 s in `flush` and
/// then 5 s more when the log was dropped; both share one 5 s now.
#[test]
fn a_stalled_output_costs_one_flush_timeout_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A reader that opens the pipe and never reads: the pipe holds 64 KiB.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::File::open(fifo).unwrap())
    };
    let log = AccessLog::open(
        &AccessLogConfig {
            enabled: true,
            format: AccessLogFormat::Json,
            output: fifo.display().to_string(),
        },
        Counter::default(),
    )
    .unwrap();
    let _reader = reader.join().unwrap();
    for i in 0..2_000 {
        let e = log.request_entry(
            "/v1/completions".into(),
            "POST",
            || "HTTP/1.1".into(),
            &format!("r-{i}"),
        );
        log.write(e);
    }
    let start = jiff::Timestamp::now();
    log.flush();
    drop(log);
    let took = jiff::Timestamp::now().duration_since(start).as_secs_f64();
    assert!((4.5..7.0).contains(&took), "flush and drop took {took} s");
}

#[test]
fn request_entry_fills_log_only_fields_only_when_the_log_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let on = AccessLog::open(
        &AccessLogConfig {
            enabled: true,
            format: AccessLogFormat::Json,
            output: dir.path().join("a.log").display().to_string(),
        },
        Counter::default(),
    )
    .unwrap();
    let e = on.request_entry(
        "/v1/completions".into(),
        "POST",
        || "HTTP/1.1".into(),
        "r-1",
    );
    assert_eq!(
        (
            e.path.as_str(),
            e.method.as_str(),
            e.protocol.as_str(),
            e.request_id.as_str()
        ),
        ("/v1/completions", "POST", "HTTP/1.1", "r-1")
    );
    assert!(e.timestamp.parse::<jiff::Timestamp>().is_ok());
    let off = AccessLog::open(
        &AccessLogConfig {
            enabled: false,
            ..AccessLogConfig::default()
        },
        Counter::default(),
    )
    .unwrap();
    let e = off.request_entry("/v1/completions".into(), "POST", || unreachable!(), "r-1");
    assert_eq!(e.path, "/v1/completions");
    assert!(e.timestamp.is_empty() && e.method.is_empty() && e.request_id.is_empty());
}

fn entry() -> Entry {
    Entry {
        timestamp: "2026-01-09T14:35:22.147Z".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        protocol: "HTTP/1.1".into(),
        status_code: 200,
        model_name: "llama2-7b".into(),
        model_route: "default/llama2-route-v1".into(),
        model_server: "default/llama2-server".into(),
        selected_pod: "llama2-deployment-5f7b8c9d-xk2p4".into(),
        request_id: "550e8400".into(),
        input_tokens: 150,
        output_tokens: 75,
        duration_total: 2350,
        duration_request_processing: 45,
        duration_upstream_processing: 2180,
        duration_response_processing: 5,
        ..Entry::default()
    }
}

#[test]
fn text_matches_go_example() {
    assert_eq!(
        entry().to_text(),
        "[2026-01-09T14:35:22.147Z] \"POST /v1/chat/completions HTTP/1.1\" 200 model_name=llama2-7b model_route=default/llama2-route-v1 model_server=default/llama2-server selected_pod=llama2-deployment-5f7b8c9d-xk2p4 request_id=550e8400 tokens=150/75 timings=2350ms(45+2180+5)"
    );
    let mut e = entry();
    e.status_code = 404;
    e.error = Some(EntryError {
        kind: "route_not_found".into(),
        message: "model x not found".into(),
    });
    assert!(e.to_text().starts_with("[2026-01-09T14:35:22.147Z] \"POST /v1/chat/completions HTTP/1.1\" 404 error=\"route_not_found:model x not found\" model_name="));
    let mut e = entry();
    e.error_origin = "upstream".into();
    e.gateway = "kthena-system/default".into();
    e.http_route = "default/llm-route".into();
    e.inference_pool = "default/pool".into();
    assert!(e.to_text().ends_with(" error_origin=upstream gateway=kthena-system/default http_route=default/llm-route inference_pool=default/pool tokens=150/75 timings=2350ms(45+2180+5)"), "{}", e.to_text());
}

#[test]
fn values_are_escaped_as_nginx_and_quoted_when_they_hold_a_space_or_equals() {
    assert_eq!(escape("plain/value-1.0_x"), "plain/value-1.0_x");
    assert_eq!(
        escape("a\nb\0\u{1b}[31m\"\\\u{7f}é"),
        "a\\x0Ab\\x00\\x1B[31m\\x22\\x5C\\x7F\\xC3\\xA9"
    );
    assert_eq!(escape_value("id user_id=admin"), "\"id user_id=admin\"");
    assert_eq!(escape_value("a=b"), "\"a=b\"");
    assert_eq!(escape_value(""), "\"\"");
    assert_eq!(escape_value("x\"y z"), "\"x\\x22y z\"");
}

#[test]
fn json_fields() {
    let v: serde_json::Value = serde_json::from_str(&entry().to_json()).unwrap();
    assert_eq!(v["status_code"], 200);
    assert_eq!(v["input_tokens"], 150);
    assert_eq!(v["duration_upstream_processing"], 2180);
    assert!(v.get("error").is_none());
    assert!(v.get("upstream_attempts").is_none());
    let v: serde_json::Value = serde_json::from_str(&Entry::default().to_json()).unwrap();
    assert_eq!(v["model_name"], "");
}
