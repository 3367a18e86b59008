use super::*;

#[test]
fn engine_names() {
    assert_eq!(
        names_for(InferenceEngine::SgLang).waiting,
        "sglang:num_queue_reqs"
    );
    assert_eq!(
        names_for(InferenceEngine::VLlm).kv_cache_usage,
        "vllm:kv_cache_usage_perc"
    );
}

#[test]
fn state_keeps_values_on_failure() {
    let mut st = EngineState::default();
    let now = Instant::now();
    let text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 3\nvllm:num_requests_waiting{engine=\"1\"} 4\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.25\nvllm:time_to_first_token_seconds_sum 1.0\nvllm:time_to_first_token_seconds_count 10\n";
    st.apply(&parse_metrics(text, VLLM).unwrap(), now);
    assert_eq!((st.waiting, st.running, st.kv_cache_usage), (4, 2, 0.25));
    assert_eq!(st.ttft_ms, None);
    let text2 = text
        .replace("_sum 1.0", "_sum 1.2")
        .replace("_count 10", "_count 12");
    st.apply(&parse_metrics(&text2, VLLM).unwrap(), now);
    let ttft = st.ttft_ms.unwrap();
    assert!((ttft - 100.0).abs() < 1e-9, "{ttft}");
    let e = Error::from(parse_metrics("<html>oops</html>", VLLM).unwrap_err());
    assert_eq!(e.to_string(), "unparsable metrics: no sample found");
    st.fail();
    assert!(st.stale);
    assert_eq!((st.waiting, st.running, st.kv_cache_usage), (4, 2, 0.25));
    assert!((st.ttft_ms.unwrap() - 100.0).abs() < 1e-9);
}

/// A scrape's failures are typed and name the URL: an error status, a refused
/// connection, and an engine that does not answer within the timeout.
#[tokio::test]
async fn scrape_failures_name_the_url() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let mut server = tokio::task::JoinSet::new();
    server.spawn(async move {
        let mut n = 0;
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            n += 1;
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            if n == 1 {
                let _ = s
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                    .await;
            } else {
                // Never answers: the scrape times out.
                held.push(s);
            }
        }
    });
    let client = crate::server::http_client();
    let url = format!("http://{addr}/metrics");
    let e = get_ok(&client, url.clone(), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::ScrapeStatus { status, .. } if status.as_u16() == 503),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!("GET {url} answered 503 Service Unavailable")
    );
    let e = get_ok(
        &client,
        format!("http://{addr}/v1/models"),
        Duration::from_millis(200),
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("GET http://{addr}/v1/models: timed out after 200ms")
    );
    // A port nothing listens on: the connect error, not hyper's "client error (Connect)".
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = get_ok(
        &client,
        format!("http://{free}/metrics"),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, Error::ScrapeTransport { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("GET http://{free}/metrics: ")),
        "{msg}"
    );
    assert!(msg.contains("Connection refused"), "{msg}");
}
