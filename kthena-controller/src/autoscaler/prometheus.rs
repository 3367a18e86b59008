//! The `prometheus` metric source: one PromQL instant query (Go `metric_collector.go`
//! `prometheus` branch, `pkg/autoscaler/autoscaler/`).

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use kthena_api::workload::PrometheusMetricSource;
use kthena_autoscale::{InvalidSample, check_sample};
use serde::Deserialize;

use super::collect::{HttpClient, SCRAPE_TIMEOUT};

const MAX_ANSWER_BYTES: usize = 1024 * 1024;

#[derive(Deserialize)]
struct Answer {
    status: String,
    data: Option<Data>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct Sample {
    value: (f64, String),
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char);
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Why a Prometheus query gave no usable value this round.
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueryError {
    /// The server URL is not `http://` (`https` is not supported yet).
    #[error("only http:// Prometheus servers are supported")]
    Scheme,
    /// The request could not be sent or answered (connection refused, reset, DNS, ...);
    /// the message carries the whole cause chain.
    #[error("{}", chain(.0))]
    Unreachable(#[source] hyper_util::client::legacy::Error),
    /// No complete answer within [`SCRAPE_TIMEOUT`].
    #[error("no answer within {}s", SCRAPE_TIMEOUT.as_secs())]
    Timeout,
    /// The server answered with a status other than 200.
    #[error("HTTP status {0}")]
    Status(http::StatusCode),
    /// The body could not be read (or exceeds 1 MiB).
    #[error("reading the answer: {0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The answer is not a successful `scalar` or one-sample `vector` (an error status, an
    /// empty vector, several series, a matrix, not JSON).
    #[error("the answer is not a successful scalar or one-sample vector")]
    Shape,
    /// The value parses but is no sample (`kthena_autoscale::check_sample`).
    #[error("value {} is {}; sample skipped", super::collect::shown(*.0), .1)]
    Invalid(f64, #[source] InvalidSample),
}

/// `e` and its sources, joined by `: ` (hyper's errors say "client error (Connect)" and keep
/// "Connection refused" two sources down).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// The value of a `scalar` or one-sample `vector` answer, if usable.
///
/// # Errors
/// [`QueryError::Shape`] or [`QueryError::Invalid`].
fn value(body: &[u8]) -> Result<f64, QueryError> {
    let answer: Answer = serde_json::from_slice(body).map_err(|_| QueryError::Shape)?;
    let data = answer
        .data
        .filter(|_| answer.status == "success")
        .ok_or(QueryError::Shape)?;
    let text = match data.result_type.as_str() {
        "scalar" => {
            serde_json::from_value::<(f64, String)>(data.result)
                .map_err(|_| QueryError::Shape)?
                .1
        }
        "vector" => {
            let mut samples: Vec<Sample> =
                serde_json::from_value(data.result).map_err(|_| QueryError::Shape)?;
            match (samples.pop(), samples.is_empty()) {
                (Some(s), true) => s.value.1,
                _ => return Err(QueryError::Shape),
            }
        }
        _ => return Err(QueryError::Shape),
    };
    // Prometheus writes `NaN`, `+Inf`, `-Inf`; Rust's parser reads all three.
    let v = text.parse::<f64>().map_err(|_| QueryError::Shape)?;
    check_sample(v).map_err(|why| QueryError::Invalid(v, why))
}

/// Runs the source's query at the server's "now" (`POST /api/v1/query`, 3 s timeout).
///
/// # Errors
/// A [`QueryError`]: an `https` server, an unreachable one (with its cause), a timeout, a
/// non-200 answer, an answer that is not a scalar or a one-element vector, or a value that
/// is no sample.
pub(super) async fn query(
    client: &HttpClient,
    source: &PrometheusMetricSource,
) -> Result<f64, QueryError> {
    let base = source.server_url.trim_end_matches('/');
    if !base.starts_with("http://") {
        return Err(QueryError::Scheme);
    }
    let body = format!("query={}", form_encode(&source.query));
    let fut = async {
        let req = http::Request::post(format!("{base}/api/v1/query"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(http_body_util::Full::new(Bytes::from(body)))
            .map_err(|_| QueryError::Scheme)?;
        let resp = client.request(req).await.map_err(QueryError::Unreachable)?;
        if resp.status() != http::StatusCode::OK {
            return Err(QueryError::Status(resp.status()));
        }
        let body = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(QueryError::Body)?
            .to_bytes();
        value(&body)
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, fut)
        .await
        .map_err(|_| QueryError::Timeout)?
}

#[cfg(test)]
mod tests {
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
}

#[cfg(test)]
mod http_tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

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
        let e = query(&client(), &source(url)).await;
        assert!(
            matches!(e, Err(QueryError::Invalid(v, InvalidSample::NotANumber)) if v.is_nan()),
            "{e:?}"
        );
        let (url, _server) = fake("-3").await?;
        let e = query(&client(), &source(url)).await;
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("value -3 is negative; sample skipped".to_owned())
        );
        let (url, _server) = fake("12.5").await?;
        let ok = query(&client(), &source(url)).await;
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
        let e = query(&client(), &source(format!("http://127.0.0.1:{port}")))
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("Connection refused"), "{e}");
        Ok(())
    }
}
