//! `multipart/form-data` request bodies (OpenAI's audio uploads): the boundary of a
//! request's `Content-Type` and the `model` form field, read with the `multer` parser.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderMap, header};

use crate::error::Error;

#[cfg(test)]
mod tests;

/// The boundary of a `multipart/form-data` `Content-Type`, `None` for any other body.
pub(crate) fn boundary(headers: &HeaderMap) -> Option<String> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    multer::parse_boundary(ct).ok()
}

/// The `model` form field of the multipart body `body` (the first part named `model`, its
/// text trimmed). Parts before it are skipped without being copied; parts after it are not
/// read.
///
/// # Errors
/// [`Error::MissingModel`] when no part is named `model` or its text is blank;
/// [`Error::InvalidField`] (`param` `body`) when the body is not well-formed multipart.
pub(crate) async fn model_field(body: Bytes, boundary: &str) -> Result<String, Error> {
    match scan(body, boundary).await {
        Ok(m) => m.ok_or(Error::MissingModel),
        Err(e) => Err(malformed(&e)),
    }
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

/// The trimmed text of the first part named `model`: `Ok(None)` when the form ended
/// without one or its text is blank; multer's error when `body` is not (or not yet) a
/// whole multipart form up to the end of that part.
async fn scan(body: Bytes, boundary: &str) -> Result<Option<String>, multer::Error> {
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    while let Some(field) = form.next_field().await? {
        if field.name() == Some("model") {
            let model = field.text().await?;
            let model = model.trim();
            // A blank model is as good as none.
            return Ok((!model.is_empty()).then(|| model.to_owned()));
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
