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
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    loop {
        let field = form.next_field().await.map_err(|e| malformed(&e))?;
        let Some(field) = field else {
            return Err(Error::MissingModel);
        };
        if field.name() == Some("model") {
            let model = field.text().await.map_err(|e| malformed(&e))?;
            let model = model.trim();
            if model.is_empty() {
                return Err(Error::MissingModel);
            }
            return Ok(model.to_owned());
        }
    }
}

fn malformed(e: &multer::Error) -> Error {
    Error::InvalidField {
        param: "body",
        reason: format!("malformed multipart/form-data body: {e}"),
    }
}
