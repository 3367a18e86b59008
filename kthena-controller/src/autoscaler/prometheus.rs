//! The `prometheus` metric source: one PromQL instant query (Go `metric_collector.go`
//! `prometheus` branch, spec §6.2).

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use kthena_api::workload::PrometheusMetricSource;
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

/// The value of a `scalar` or one-sample `vector` answer, if finite.
fn value(body: &[u8]) -> Option<f64> {
    let answer: Answer = serde_json::from_slice(body).ok()?;
    let data = answer.data.filter(|_| answer.status == "success")?;
    let text = match data.result_type.as_str() {
        "scalar" => serde_json::from_value::<(f64, String)>(data.result).ok()?.1,
        "vector" => {
            let mut samples: Vec<Sample> = serde_json::from_value(data.result).ok()?;
            if samples.len() != 1 {
                return None;
            }
            samples.pop()?.value.1
        }
        _ => return None,
    };
    let v = match text.as_str() {
        "+Inf" | "-Inf" | "NaN" => return None,
        t => t.parse::<f64>().ok()?,
    };
    v.is_finite().then_some(v)
}

/// Runs the source's query at the server's "now" (`POST /api/v1/query`, 3 s timeout).
/// `None` for an `https` server (not supported yet), a non-200 answer, an error status, a
/// result that is not a scalar or a one-element vector, or a non-finite value.
pub(super) async fn query(client: &HttpClient, source: &PrometheusMetricSource) -> Option<f64> {
    let base = source.server_url.trim_end_matches('/');
    if !base.starts_with("http://") {
        tracing::warn!(server = %base, "Only http:// Prometheus servers are supported");
        return None;
    }
    let body = format!("query={}", form_encode(&source.query));
    let fut = async {
        let req = http::Request::post(format!("{base}/api/v1/query"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(http_body_util::Full::new(Bytes::from(body)))
            .ok()?;
        let resp = client.request(req).await.ok()?;
        if resp.status() != http::StatusCode::OK {
            return None;
        }
        let body = Limited::new(resp.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .ok()?
            .to_bytes();
        value(&body)
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, fut)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_and_single_vectors_have_values() {
        let v = |s: &str| value(s.as_bytes());
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
        assert_eq!(
            form_encode("sum(a{b=\"c d\"})"),
            "sum%28a%7Bb%3D%22c%20d%22%7D%29"
        );
    }
}
