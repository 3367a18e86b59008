//! vLLM's audio endpoints: `/v1/audio/transcriptions` and `/v1/audio/translations`, whose
//! `multipart/form-data` bodies carry the `model` and the audio `file` as form fields
//! (vLLM's `TranscriptionRequest`, `vllm/entrypoints/openai/protocol.py`).
//!
//! The audio is read chunk by chunk and never held whole; the answer is vLLM's JSON
//! response shape, `{"text": "..."}`, whose text says how many bytes of audio arrived (a
//! test checks a large upload went through whole). Each request counts as one finished
//! request in the engine's metrics, as generation requests do; an upload whose form is not
//! read to its end (the client or a proxy closed the connection mid-body, or the handler
//! was dropped with it) counts as `finished_reason="abort"`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Multipart, State};
use axum::response::Response;
use axum::routing::post;
use http::StatusCode;
use serde_json::json;

use super::body::{ApiError, json_response};
use super::request::resolve_lora;
use super::shared::{InFlight, Shared};

/// The routes of this module.
pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/audio/transcriptions", post(transcribe))
        .route("/v1/audio/translations", post(transcribe))
}

fn bad_form(e: &axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::new(
        e.status(),
        format!("Invalid multipart body: {}", e.body_text()),
    )
}

/// Counts an upload whose form was not read to its end (its body broke off, or the
/// handler was dropped) as aborted (vLLM's `finished_reason="abort"`), when dropped.
struct Upload<'a> {
    s: &'a Shared,
    whole: bool,
}

impl Drop for Upload<'_> {
    fn drop(&mut self) {
        if !self.whole {
            self.s.metrics.inc_aborted();
        }
    }
}

async fn transcribe(
    State(s): State<Arc<Shared>>,
    mut form: Multipart,
) -> Result<Response, ApiError> {
    let _guard = InFlight::new(&s);
    let mut upload = Upload {
        s: &s,
        whole: false,
    };
    let mut model = None;
    let mut audio: Option<usize> = None;
    while let Some(mut field) = form.next_field().await.map_err(|e| bad_form(&e))? {
        match field.name() {
            Some("model") => model = Some(field.text().await.map_err(|e| bad_form(&e))?),
            Some("file") => {
                let mut n = 0;
                while let Some(chunk) = field.chunk().await.map_err(|e| bad_form(&e))? {
                    n += chunk.len();
                }
                audio = Some(n);
            }
            _ => {}
        }
    }
    upload.whole = true;
    let model =
        model.ok_or_else(|| ApiError::bad_request("Field required: model").with_param("model"))?;
    resolve_lora(&s, &model)?;
    let bytes =
        audio.ok_or_else(|| ApiError::bad_request("Field required: file").with_param("file"))?;
    s.metrics.observe_request(0, 0);
    Ok(json_response(
        StatusCode::OK,
        &json!({"text": format!("{bytes} bytes of audio")}),
    ))
}
