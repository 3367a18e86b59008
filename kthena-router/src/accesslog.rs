//! The access log: one line per `/v1/*` request after it completed, in Go Kthena's text or
//! JSON format (`pkg/kthena-router/accesslog/*`, spec §2.14).

use std::fmt::Write as _;
use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;

use crate::config::{AccessLogConfig, AccessLogFormat};
use crate::error::{Error, Result};

/// One access-log entry. Empty strings and zero numbers are left out of the line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Entry {
    /// Start time, RFC 3339 with nanoseconds, UTC.
    pub timestamp: String,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub protocol: String,
    /// Status sent to the client.
    pub status_code: u16,
    /// `{type, message}` of the error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EntryError>,
    /// The request's model (always present in JSON).
    pub model_name: String,
    /// `namespace/name` of the matched ModelRoute.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model_route: String,
    /// `namespace/name` of the ModelServer.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model_server: String,
    /// The endpoint that served the request (the last attempt's; Go logs the first ranked).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub selected_pod: String,
    /// `x-request-id`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The authenticated user (the JWT's `sub`; not in Go Kthena's log).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_id: String,
    /// `model_server`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub backend_type: String,
    /// `namespace/name` of the backend.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub backend_name: String,
    /// The model sent upstream.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub upstream_model: String,
    /// Status of the last upstream answer.
    #[serde(skip_serializing_if = "is_zero_u16")]
    pub upstream_status_code: u16,
    /// Number of upstream attempts.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub upstream_attempts: usize,
    /// `upstream` or `downstream` or `internal` for errors.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error_origin: String,
    /// `namespace/name` of the Gateway whose listener took the request (Gateway API mode).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    /// `namespace/name` of the HTTPRoute that matched (Inference Extension).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub http_route: String,
    /// `namespace/name` of the InferencePool the request went to (Inference Extension).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub inference_pool: String,
    /// Input tokens (estimate or engine-reported).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub input_tokens: u64,
    /// Output tokens reported by the engine.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub output_tokens: u64,
    /// Total duration, ms.
    pub duration_total: u64,
    /// Request processing (parse, match, schedule), ms.
    pub duration_request_processing: u64,
    /// Upstream (first attempt sent to the response headers of the last), ms.
    pub duration_upstream_processing: u64,
    /// Response processing (streaming the body), ms.
    pub duration_response_processing: u64,
}

/// The `error` object of an entry.
#[derive(Debug, Clone, Serialize)]
pub struct EntryError {
    /// Finish reason (`route_not_found`, `proxy`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Human message.
    pub message: String,
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_usize(v: &usize) -> bool {
    *v == 0
}

// === impl Entry ===

impl Entry {
    /// Go Kthena's text line:
    /// `[ts] "METHOD path proto" status[ error=t:m][ k=v]...[ tokens=in/out] timings=T ms(a+b+c)`.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "[{}] \"{} {} {}\" {}",
            self.timestamp, self.method, self.path, self.protocol, self.status_code
        );
        if let Some(e) = &self.error {
            let _ = write!(s, " error={}:{}", e.kind, e.message);
        }
        let pairs = [
            ("model_name", &self.model_name),
            ("model_route", &self.model_route),
            ("model_server", &self.model_server),
            ("selected_pod", &self.selected_pod),
            ("request_id", &self.request_id),
            ("user_id", &self.user_id),
            ("backend_type", &self.backend_type),
            ("backend_name", &self.backend_name),
            ("upstream_model", &self.upstream_model),
        ];
        for (k, v) in pairs {
            if !v.is_empty() {
                let _ = write!(s, " {k}={v}");
            }
        }
        if self.upstream_status_code > 0 {
            let _ = write!(s, " upstream_status_code={}", self.upstream_status_code);
        }
        if self.upstream_attempts > 0 {
            let _ = write!(s, " upstream_attempts={}", self.upstream_attempts);
        }
        if !self.error_origin.is_empty() {
            let _ = write!(s, " error_origin={}", self.error_origin);
        }
        for (k, v) in [
            ("gateway", &self.gateway),
            ("http_route", &self.http_route),
            ("inference_pool", &self.inference_pool),
        ] {
            if !v.is_empty() {
                let _ = write!(s, " {k}={v}");
            }
        }
        if self.input_tokens > 0 || self.output_tokens > 0 {
            let _ = write!(s, " tokens={}/{}", self.input_tokens, self.output_tokens);
        }
        let _ = write!(
            s,
            " timings={}ms({}+{}+{})",
            self.duration_total,
            self.duration_request_processing,
            self.duration_upstream_processing,
            self.duration_response_processing
        );
        s
    }

    /// One JSON object.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Writes entries to stdout, stderr or a file (append).
#[derive(Debug)]
pub struct AccessLog {
    enabled: bool,
    format: AccessLogFormat,
    out: Mutex<Output>,
}

enum Output {
    Stdout,
    Stderr,
    File(std::fs::File),
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::File(_) => "file",
        })
    }
}

impl AccessLog {
    /// Opens the configured output (a path is created with mode 0644 and appended to).
    ///
    /// # Errors
    /// [`Error::AccessLogOpen`] when the file cannot be opened for appending.
    pub fn open(cfg: &AccessLogConfig) -> Result<Self> {
        let out = match cfg.output.as_str() {
            "stdout" | "" => Output::Stdout,
            "stderr" => Output::Stderr,
            path => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| Error::AccessLogOpen {
                        path: path.into(),
                        source,
                    })?;
                Output::File(f)
            }
        };
        Ok(Self {
            enabled: cfg.enabled,
            format: cfg.format,
            out: Mutex::new(out),
        })
    }

    /// Whether entries are written at all.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Writes one entry (a write error is reported through tracing, never to the client).
    pub fn write(&self, e: &Entry) {
        if !self.enabled {
            return;
        }
        let mut line = match self.format {
            AccessLogFormat::Text => e.to_text(),
            AccessLogFormat::Json => e.to_json(),
        };
        line.push('\n');
        let mut out = match self.out.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let res = match &mut *out {
            Output::Stdout => std::io::stdout().lock().write_all(line.as_bytes()),
            Output::Stderr => std::io::stderr().lock().write_all(line.as_bytes()),
            Output::File(f) => f.write_all(line.as_bytes()),
        };
        if let Err(err) = res {
            tracing::warn!(%err, "Access log write failed");
        }
    }
}

/// RFC 3339 with nanoseconds, UTC, for "now".
#[must_use]
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(e.to_text().starts_with("[2026-01-09T14:35:22.147Z] \"POST /v1/chat/completions HTTP/1.1\" 404 error=route_not_found:model x not found model_name="));
        let mut e = entry();
        e.error_origin = "upstream".into();
        e.gateway = "kthena-system/default".into();
        e.http_route = "default/llm-route".into();
        e.inference_pool = "default/pool".into();
        assert!(e.to_text().ends_with(" error_origin=upstream gateway=kthena-system/default http_route=default/llm-route inference_pool=default/pool tokens=150/75 timings=2350ms(45+2180+5)"), "{}", e.to_text());
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
}
