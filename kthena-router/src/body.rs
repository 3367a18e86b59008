//! The body types of every router answer: [`RespBody`] (boxed, unsync) and its error type,
//! shared by the proxy, the pipeline's layers, the listeners and the error answers.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

/// Boxed error of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The response body type of every router answer.
pub type RespBody = UnsyncBoxBody<Bytes, BoxError>;

/// A whole body from bytes.
#[must_use]
pub(crate) fn full(b: impl Into<Bytes>) -> RespBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}
