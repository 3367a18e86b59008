//! The operational endpoints: `/health`, `/metrics`, `/v1/models`, LoRA adapter load and
//! unload, `/reset_prefix_cache`, and the 404 fallback.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;

use super::body::{ApiError, RawBody, json_response, parse, text_ok};
use super::shared::Shared;
use super::wire::{ModelCard, ModelList, Permission};
use crate::engine::Command;

/// The routes of this module.
pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/load_lora_adapter", post(load_lora))
        .route("/v1/unload_lora_adapter", post(unload_lora))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
}

/// The fallback: vLLM's 404 in its error shape.
pub(super) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "Not Found")
}

/// Until the model has loaded (`--startup-delay-ms`): 503 for every path but `/metrics`
/// (`/health` included, so a readiness probe fails), each refusal counted.
pub(super) async fn while_loading(
    State(s): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if s.is_loaded() || req.uri().path() == "/metrics" {
        return next.run(req).await;
    }
    if req.uri().path() != "/health" {
        s.refused_loading
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tracing::warn!(path = %req.uri().path(), "Request refused: the model is still loading");
    }
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "The model is still loading",
    )
    .into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    if let Some(code) = s.faults.load().metrics_status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, format!("Injected fault: {status}\n")).into_response();
    }
    let mut resp = Response::new(Body::from(s.metrics.encode()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}

async fn models(State(s): State<Arc<Shared>>) -> Response {
    let card = |id: &str, root: &str, parent: Option<&str>| ModelCard {
        id: id.to_owned(),
        object: "model",
        created: s.created,
        owned_by: "vllm",
        root: root.to_owned(),
        parent: parent.map(str::to_owned),
        max_model_len: s.cfg.profile.max_model_len,
        permission: vec![Permission {
            id: format!("modelperm-{:016x}", s.created ^ s.cfg.seed),
            object: "model_permission",
            created: s.created,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: "*",
            group: None,
            is_blocking: false,
        }],
    };
    let mut data = vec![card(&s.cfg.model, &s.cfg.model, None)];
    let loras = s
        .loras
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for (name, path) in &loras {
        data.push(card(name, path, Some(&s.cfg.model)));
    }
    json_response(
        StatusCode::OK,
        &ModelList {
            object: "list",
            data,
        },
    )
}

#[derive(Debug, Deserialize)]
struct LoraRequest {
    lora_name: String,
    #[serde(default)]
    lora_path: Option<String>,
}

async fn load_lora(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: LoraRequest = parse(&body)?;
    let path = req
        .lora_path
        .filter(|p| !p.is_empty() && !req.lora_name.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("Both 'lora_name' and 'lora_path' must be provided.")
        })?;
    let mut loras = s
        .loras
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if loras.contains_key(&req.lora_name) {
        return Err(ApiError::bad_request(format!(
            "The lora adapter '{}' has already been loaded.",
            req.lora_name
        ))
        .with_param("lora_name"));
    }
    loras.insert(req.lora_name.clone(), path);
    Ok(text_ok(format!(
        "Success: LoRA adapter '{}' added successfully.",
        req.lora_name
    )))
}

async fn unload_lora(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: LoraRequest = parse(&body)?;
    let mut loras = s
        .loras
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if loras.remove(&req.lora_name).is_none() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("The lora adapter '{}' cannot be found.", req.lora_name),
        )
        .with_param("lora_name"));
    }
    Ok(text_ok(format!(
        "Success: LoRA adapter '{}' removed successfully.",
        req.lora_name
    )))
}

async fn reset_prefix_cache(State(s): State<Arc<Shared>>) -> StatusCode {
    let _ = s.engine.send(Command::ResetPrefixCache);
    StatusCode::OK
}
