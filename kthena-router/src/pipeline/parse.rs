//! Parse: the inference paths and method, the bounded body read (size and read timeouts)
//! and the OpenAI body parse. Leaves [`Parsed`] (body and routing snapshot); the request
//! goes on without a body.

use std::sync::Arc;

use bytes::Bytes;
use std::task::{Context, Poll};

use http::{Method, Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{BoxFut, Parsed};
use crate::accounting::Accounting;
use crate::body::{BoxError, RespBody};
use crate::error::Error;
use crate::listener::ListenerConfig;
use crate::openai::{parse_request_at, prompt_member};
use crate::shared::Shared;

/// Reads and parses the body of the inference paths (`POST /v1/chat/completions`,
/// `/v1/completions`, `/v1/responses`).
#[derive(Debug, Clone)]
pub(crate) struct ParseLayer {
    shared: Arc<Shared>,
}

impl ParseLayer {
    /// The layer over the router's shared state.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;
    fn layer(&self, inner: S) -> Parse<S> {
        Parse {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of [`ParseLayer`], generic over the client body `B` (hyper's `Incoming`).
#[derive(Debug, Clone)]
pub(crate) struct Parse<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, B> Service<Request<B>> for Parse<S>
where
    S: Service<Request<()>, Response = Response<RespBody>, Error = Error> + Clone + Send + 'static,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<RespBody>;
    type Error = Error;
    type Future = BoxFut;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> BoxFut {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(run(Arc::clone(&self.shared), req, inner))
    }
}

async fn run<S, B>(
    shared: Arc<Shared>,
    req: Request<B>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<()>, Response = Response<RespBody>, Error = Error>,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let path = req.uri().path();
    if !is_inference_path(path) {
        return Err(Error::UnknownPath {
            path: path.to_owned(),
        });
    }
    if req.method() != Method::POST {
        return Err(Error::MethodNotAllowed {
            method: req.method().to_string(),
            path: path.to_owned(),
        });
    }
    let member = prompt_member(path);
    let (parts, raw) = read_body(req, shared.max_body_bytes, &shared.listener).await?;
    let parsed = parse_request_at(raw, member)?;
    let snap = shared.snapshot.load_full();
    if let Some(acct) = parts.extensions.get::<Accounting>() {
        acct.parsed(&parsed, snap.routes.knows(&parsed.model));
    }
    let mut req = Request::from_parts(parts, ());
    req.extensions_mut().insert(Parsed {
        req: Arc::new(parsed),
        snap,
    });
    inner.call(req).await
}

/// Whether `path` is one of the inference paths this stage parses.
pub(crate) fn is_inference_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/chat/completions" | "/v1/completions" | "/v1/responses" | "/v1/messages"
    )
}

/// Reads the whole body: at most `limit` bytes (413 beyond), no gap between two reads longer
/// than the idle timeout and no more than the total timeout for all of it (408).
async fn read_body<B>(
    req: Request<B>,
    limit: usize,
    l: &ListenerConfig,
) -> Result<(http::request::Parts, Bytes), Error>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    if let Some(enc) = parts.headers.get(header::CONTENT_ENCODING)
        && !enc.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        return Err(Error::UnsupportedEncoding {
            encoding: String::from_utf8_lossy(enc.as_bytes()).into_owned(),
        });
    }
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(Error::BodyTooLarge { limit });
    }
    let deadline = Instant::now() + l.body_read_timeout;
    let mut body = Limited::new(body, limit);
    let mut buf =
        bytes::BytesMut::with_capacity(declared.map_or(0, |n| usize::try_from(n).unwrap_or(0)));
    loop {
        let idle_end = Instant::now() + l.body_read_idle_timeout;
        let (end, idle) = if idle_end < deadline {
            (idle_end, true)
        } else {
            (deadline, false)
        };
        let Ok(frame) = tokio::time::timeout_at(end, body.frame()).await else {
            let timeout = if idle {
                l.body_read_idle_timeout
            } else {
                l.body_read_timeout
            };
            return Err(Error::BodyTimeout { idle, timeout });
        };
        match frame {
            None => return Ok((parts, buf.freeze())),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return Err(Error::BodyTooLarge { limit });
            }
            Some(Err(e)) if client_went_away(&*e) => {
                return Err(Error::ClientClosedRequest {
                    reason: e.to_string(),
                });
            }
            Some(Err(e)) => {
                return Err(Error::BodyRead {
                    reason: e.to_string(),
                });
            }
        }
    }
}

/// Whether a body read error means the client closed or reset its connection (an early EOF,
/// a reset, a broken pipe), as opposed to a malformed body.
fn client_went_away(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt;

    use super::*;
    use crate::pipeline::test_util::{self, Seen};

    #[tokio::test]
    async fn parses_the_body_and_leaves_it_for_the_next_stage() {
        let (shared, _) = test_util::shared(&[]);
        let (seen, inner) = test_util::recorder();
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let resp = ParseLayer::new(shared)
            .layer(inner)
            .oneshot(test_util::request("/v1/chat/completions", body))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let Seen { parsed, .. } = seen.lock().unwrap().take().unwrap();
        let p = parsed.unwrap();
        assert_eq!(p.req.model, "m");
        assert!(p.req.stream);
    }

    #[tokio::test]
    async fn rejects_paths_methods_and_bad_bodies_before_the_next_stage() {
        let (shared, _) = test_util::shared(&[]);
        let (seen, inner) = test_util::recorder();
        let svc = ParseLayer::new(shared).layer(inner);
        let cases = [
            ("/v1/embeddings", "{}", "unknown_url"),
            ("/v1/completions", "{", "invalid_json"),
            ("/v1/completions", r#"{"prompt":"x"}"#, "missing_model"),
            ("/v1/completions", r#"{"model":"m"}"#, "missing_prompt"),
        ];
        for (path, body, code) in cases {
            let e = svc
                .clone()
                .oneshot(test_util::request(path, body))
                .await
                .unwrap_err();
            assert_eq!(e.code(), code, "{path} {body}");
        }
        let get = test_util::request_with(Method::GET, "/v1/completions", "");
        let e = svc.clone().oneshot(get).await.unwrap_err();
        assert_eq!(e.code(), "method_not_allowed");
        assert!(seen.lock().unwrap().is_none());
    }
}
