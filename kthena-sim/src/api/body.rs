//! Bodies in and out: vLLM's JSON error shape ([`ApiError`]), JSON, plain-text and SSE
//! response bodies, and the size-limited request body.

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

// === errors ===

/// An error in vLLM's JSON shape: `{"error":{"message","type","param","code"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<String>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(super) fn with_param(mut self, p: &str) -> Self {
        self.param = Some(p.to_owned());
        self
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 => "BadRequestError",
            401 => "AuthenticationError",
            404 => "NotFoundError",
            // vLLM answers HTTP-level errors with the reason phrase as the type.
            413 => "Request Entity Too Large",
            429 => "RateLimitError",
            500 => "InternalServerError",
            503 => "ServiceUnavailableError",
            _ => "APIError",
        }
    }
}

/// vLLM's error body, fields in vLLM's order.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: u16,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind(),
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        };
        json_response(self.status, &body)
    }
}

pub(super) fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A request body read up to the engine's `max_body_bytes`; a larger one is answered 413 in
/// vLLM's error shape (axum's own rejection is plain text).
#[derive(Debug)]
pub(super) struct RawBody(pub(super) Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(Self)
            .map_err(|r| {
                let status = r.status();
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(status, "Request body is larger than the server's limit.")
                } else {
                    ApiError::new(
                        status,
                        format!("Cannot read the request body: {}", r.body_text()),
                    )
                }
            })
    }
}

pub(super) fn parse<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}")))
}

pub(super) fn text_ok(msg: String) -> Response {
    let mut resp = Response::new(Body::from(msg));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub(super) fn sse(chunk: &impl Serialize) -> Bytes {
    let mut out = b"data: ".to_vec();
    let _ = serde_json::to_writer(&mut out, chunk);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// An SSE response (`text/event-stream`) whose body is what `producer` sends on the channel
/// of `frames`; the body ends when `producer` is done and has dropped its sender, or with
/// the error it sends.
pub(super) fn sse_response(
    frames: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    producer: impl Future<Output = ()> + Send + 'static,
) -> Response {
    let body_stream = futures_util::stream::unfold(frames, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let stream = futures_util::stream::select(
        body_stream,
        futures_util::stream::once(producer)
            .filter_map(|()| async { None::<Result<Bytes, std::io::Error>> }),
    );
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    resp
}
