use super::*;

#[test]
fn scalars_and_single_vectors_have_values() {
    let v = |s: &str| value(s.as_bytes()).ok();
    assert_eq!(
        v(r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"4.25"]}}"#),
        Some(4.25)
    );
    assert_eq!(
        v(
            r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"8"]}]}}"#
        ),
        Some(8.0)
    );
    assert_eq!(
        v(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#),
        None
    );
    assert_eq!(
        v(r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"NaN"]}}"#),
        None
    );
    assert_eq!(v(r#"{"status":"error","errorType":"bad_data"}"#), None);
    assert_eq!(v("garbage"), None);
    for (text, why) in [
        ("NaN", InvalidSample::NotANumber),
        ("+Inf", InvalidSample::Infinite),
        ("-Inf", InvalidSample::Infinite),
        ("-1", InvalidSample::Negative),
        ("1e300", InvalidSample::TooLarge),
    ] {
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1.5,"{text}"]}}]}}}}"#
        );
        match value(body.as_bytes()) {
            Err(QueryError::Invalid(_, w)) => assert_eq!(w, why, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(
        form_encode("sum(a{b=\"c d\"})"),
        "sum%28a%7Bb%3D%22c%20d%22%7D%29"
    );
}

/// The Prometheus client against a local HTTP server.
mod http {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::super::*;

    fn client() -> HttpClient {
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http()
    }

    fn source(url: String) -> PrometheusMetricSource {
        PrometheusMetricSource {
            server_url: url,
            query: "up".to_owned(),
            ..PrometheusMetricSource::default()
        }
    }

    /// A Prometheus API on 127.0.0.1 that answers every query with `value` (one sample),
    /// served while the returned set lives.
    async fn fake(value: &'static str) -> std::io::Result<(String, tokio::task::JoinSet<()>)> {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", l.local_addr()?);
        let mut set = tokio::task::JoinSet::new();
        set.spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = format!(
                    r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[1.5,"{value}"]}}]}}}}"#
                );
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        Ok((url, set))
    }

    #[tokio::test]
    async fn a_nan_answer_is_refused_and_a_number_is_used() -> std::io::Result<()> {
        let (url, _server) = fake("NaN").await?;
        let e = query(
            &client(),
            &TlsClients::default(),
            &source(url),
            &Access::default(),
        )
        .await;
        assert!(
            matches!(e, Err(QueryError::Invalid(v, InvalidSample::NotANumber)) if v.is_nan()),
            "{e:?}"
        );
        let (url, _server) = fake("-3").await?;
        let e = query(
            &client(),
            &TlsClients::default(),
            &source(url),
            &Access::default(),
        )
        .await;
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("value -3 is negative; sample skipped".to_owned())
        );
        let (url, _server) = fake("12.5").await?;
        let ok = query(
            &client(),
            &TlsClients::default(),
            &source(url),
            &Access::default(),
        )
        .await;
        assert_eq!(ok.ok(), Some(12.5));
        Ok(())
    }

    /// An unreachable server's error carries its cause, not only "client error (Connect)".
    #[tokio::test]
    async fn an_unreachable_server_error_names_its_cause() -> std::io::Result<()> {
        let port = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await?
            .local_addr()?
            .port();
        let e = query(
            &client(),
            &TlsClients::default(),
            &source(format!("http://127.0.0.1:{port}")),
            &Access::default(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("Connection refused"), "{e}");
        Ok(())
    }
}
