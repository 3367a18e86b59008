//! The `prometheus` metric source: one PromQL instant query (Go `metric_collector.go`
//! `prometheus` branch, `pkg/autoscaler/autoscaler/`), over `http://` or `https://`, with
//! the credentials and CA of [`access`] (not in Go Kthena v1.0.0, which sends plain
//! unauthenticated requests).

pub(crate) mod access;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use kthena_api::workload::PrometheusMetricSource;
use kthena_autoscale::{InvalidSample, check_sample};
use serde::Deserialize;

use super::collect::{HttpClient, SCRAPE_TIMEOUT};
use access::{Access, AccessError, TlsClients, TlsError};

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
    /// The server URL is neither `http://` nor `https://`.
    #[error("only http:// and https:// Prometheus servers are supported")]
    Scheme,
    /// The credentials or the CA could not be read.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// No TLS client for the source's TLS settings.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The request could not be sent or answered (connection refused, reset, DNS, ...);
    /// the message carries the whole cause chain.
    #[error("{}", kthena_api::error_chain(.0))]
    Unreachable(#[source] hyper_util::client::legacy::Error),
    /// No complete answer within [`SCRAPE_TIMEOUT`].
    #[error("no answer within {}s", SCRAPE_TIMEOUT.as_secs())]
    Timeout,
    /// The server answered with a status other than 200 (401 and 403 say the credentials
    /// were refused).
    #[error("HTTP status {status}{}", refused(*status))]
    Status {
        /// The answer's status.
        status: http::StatusCode,
    },
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

/// The hint after a 401 or 403 status.
fn refused(status: http::StatusCode) -> &'static str {
    match status {
        http::StatusCode::UNAUTHORIZED | http::StatusCode::FORBIDDEN => {
            ": the server refused access (check the source's auth)"
        }
        _ => "",
    }
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

/// Runs the source's query at the server's "now" (`POST /api/v1/query`, 3 s timeout), with
/// `access`'s `Authorization` header; an `https://` server through `tls`'s client for
/// `access.tls`, an `http://` one through `http`.
///
/// # Errors
/// A [`QueryError`]: a server neither `http` nor `https`, no TLS client, an unreachable
/// server (with its cause: refused connection, TLS handshake), a timeout, a non-200
/// answer, an answer that is not a scalar or a one-element vector, or a value that is no
/// sample.
pub(super) async fn query(
    http: &HttpClient,
    tls: &TlsClients,
    source: &PrometheusMetricSource,
    access: &Access,
) -> Result<f64, QueryError> {
    let base = source.server_url.trim_end_matches('/');
    let https = if base.starts_with("https://") {
        Some(tls.client(&access.tls)?)
    } else if base.starts_with("http://") {
        None
    } else {
        return Err(QueryError::Scheme);
    };
    let body = format!("query={}", form_encode(&source.query));
    let fut = async {
        let mut req = http::Request::post(format!("{base}/api/v1/query"))
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(auth) = &access.authorization {
            req = req.header(http::header::AUTHORIZATION, auth.clone());
        }
        let req = req
            .body(http_body_util::Full::new(Bytes::from(body)))
            .map_err(|_| QueryError::Scheme)?;
        let resp = match &https {
            Some(client) => client.request(req).await,
            None => http.request(req).await,
        };
        let resp = resp.map_err(QueryError::Unreachable)?;
        if resp.status() != http::StatusCode::OK {
            return Err(QueryError::Status {
                status: resp.status(),
            });
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
mod tests;
