//! `multipart/form-data` request bodies (OpenAI's audio uploads): the boundary of a
//! request's `Content-Type` and the `model` form field, read with the `multer` parser.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, header};
use tokio::sync::mpsc;

use crate::error::Error;

#[cfg(test)]
mod tests;

mod watch;

pub(crate) use watch::FormWatch;

/// The boundary of a `multipart/form-data` `Content-Type`, `None` for any other body.
pub(crate) fn boundary(headers: &HeaderMap) -> Option<String> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    multer::parse_boundary(ct).ok()
}

/// The `model` form field of the whole multipart body `body`, verbatim (the engine reads
/// the same text: it is neither trimmed nor rewritten). Other parts are skipped without
/// being copied.
///
/// # Errors
/// [`Error::MissingModel`] when no part is named `model` or its text is blank;
/// [`Error::InvalidField`] (`param` `model`) when more than one part is named `model` (the
/// router would route by one and the engine serve another); [`Error::InvalidField`]
/// (`param` `body`) when the body is not well-formed multipart.
pub(crate) async fn model_field(body: Bytes, boundary: &str) -> Result<String, Error> {
    let model = match scan(body.clone(), boundary).await {
        Ok(m) => m.ok_or(Error::MissingModel)?,
        Err(e) => return Err(malformed(&e)),
    };
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    watch::at_most_one_model(multer::Multipart::new(stream, boundary)).await?;
    Ok(model)
}

/// The `model` form field of `prefix`, the first bytes of a multipart body still being
/// read: `Ok(None)` while the prefix ends before the `model` part is complete (read more
/// and ask again).
///
/// # Errors
/// As [`model_field`], for what the prefix already shows: a blank `model`, or bytes that
/// are not multipart whatever follows.
pub(crate) async fn model_in_prefix(
    prefix: Bytes,
    boundary: &str,
) -> Result<Option<String>, Error> {
    match scan(prefix, boundary).await {
        Ok(Some(m)) => Ok(Some(m)),
        // The closing boundary came without a `model` part: the whole form was read.
        Ok(None) => Err(Error::MissingModel),
        Err(
            multer::Error::IncompleteStream
            | multer::Error::IncompleteHeaders
            | multer::Error::IncompleteFieldData { .. },
        ) => Ok(None),
        Err(e) => Err(malformed(&e)),
    }
}

/// The text of the first part named `model`, verbatim: `Ok(None)` when the form ended
/// without one or its text is blank; multer's error when `body` is not (or not yet) a
/// whole multipart form up to the end of that part.
async fn scan(body: Bytes, boundary: &str) -> Result<Option<String>, multer::Error> {
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    while let Some(field) = form.next_field().await? {
        if field.name() == Some("model") {
            let model = field.text().await?;
            // A blank model is as good as none.
            return Ok((!model.trim().is_empty()).then_some(model));
        }
    }
    Ok(None)
}

fn malformed(e: &multer::Error) -> Error {
    Error::InvalidField {
        param: "body",
        reason: format!("malformed multipart/form-data body: {e}"),
    }
}

/// The refusal of a form with a second `model` part.
fn duplicate_model() -> Error {
    Error::InvalidField {
        param: "model",
        reason: "more than one `model` form field".to_owned(),
    }
}
