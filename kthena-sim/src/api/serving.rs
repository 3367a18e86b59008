//! The vLLM 0.32 endpoints routers call besides generation: prompt rendering
//! (`/v1/completions/render`, `/v1/chat/completions/render`), `/tokenize`, `/detokenize`,
//! `/version`, `/load` and `/ping`.
//!
//! Render bodies are vLLM's token-in `GenerateRequest` (`vllm/entrypoints/serve/disagg/
//! protocol.py`), in its field order: `request_id`, `token_ids`, `assistant_tokens_mask`,
//! `token_offsets`, `features`, `sampling_params`, `model`, `stream`, `stream_options`,
//! `cache_salt`, `priority`, `kv_transfer_params`. Completions render answers a list (one per
//! prompt), chat render one object. Requests are validated exactly as generation requests are
//! (unknown model 404, context length 400, ...), and nothing is generated.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::body::{ApiError, RawBody, json_response, parse};
use super::request::{Gen, chat_request, completion_request, render_messages};
use super::shared::Shared;
use super::wire::Message;

/// vLLM's version string, as `GET /version` reports it.
pub(super) const VLLM_VERSION: &str = "0.32.0";

/// The routes of this module.
pub(super) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/completions/render", post(render_completions))
        .route("/v1/chat/completions/render", post(render_chat))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/version", get(version))
        .route("/load", get(load))
        .route("/ping", get(ping).post(ping))
}

/// The sampling parameters the simulator honours, under vLLM's `SamplingParams` names.
#[derive(Debug, Serialize)]
struct SamplingParams {
    n: u32,
    seed: Option<u64>,
    max_tokens: usize,
}

/// vLLM's `GenerateRequest`.
#[derive(Debug, Serialize)]
struct GenerateRequest<'a> {
    request_id: &'a str,
    token_ids: &'a [u32],
    assistant_tokens_mask: Option<Vec<u8>>,
    token_offsets: Option<Vec<(usize, usize)>>,
    features: Option<Value>,
    sampling_params: SamplingParams,
    model: &'a str,
    stream: bool,
    stream_options: Option<Value>,
    cache_salt: Option<&'a str>,
    priority: i64,
    kv_transfer_params: Option<&'a Value>,
}

/// The fields of a request body that a render echoes but generation does not keep.
#[derive(Debug, Default, Deserialize)]
struct Echo {
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stream_options: Option<Value>,
    #[serde(default)]
    priority: Option<i64>,
    #[serde(default)]
    kv_transfer_params: Option<Value>,
}

fn generate_request<'a>(g: &'a Gen, echo: &'a Echo) -> GenerateRequest<'a> {
    GenerateRequest {
        request_id: &g.id,
        token_ids: &g.prompt,
        assistant_tokens_mask: None,
        token_offsets: None,
        features: None,
        sampling_params: SamplingParams {
            n: 1,
            seed: echo.seed,
            max_tokens: g.max_tokens,
        },
        model: &g.model,
        stream: g.stream,
        stream_options: echo.stream_options.clone(),
        cache_salt: g.cache_salt.as_deref(),
        priority: echo.priority.unwrap_or(0),
        kv_transfer_params: echo.kv_transfer_params.as_ref(),
    }
}

async fn render_completions(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let g = completion_request(&s, &body)?;
    let echo: Echo = parse(&body)?;
    Ok(json_response(
        StatusCode::OK,
        &[generate_request(&g, &echo)],
    ))
}

async fn render_chat(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let g = chat_request(&s, &body)?;
    let echo: Echo = parse(&body)?;
    Ok(json_response(StatusCode::OK, &generate_request(&g, &echo)))
}

/// `/tokenize` response, fields in vLLM's order.
#[derive(Serialize)]
struct TokenizeResponse<'a> {
    count: usize,
    max_model_len: usize,
    tokens: &'a [u32],
    token_strs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    /// vLLM's default: true for prompts, false for messages.
    #[serde(default)]
    add_special_tokens: Option<bool>,
}

async fn tokenize(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: TokenizeRequest = parse(&body)?;
    let tokens = match (req.prompt, req.messages) {
        (Some(p), _) => s
            .tokenizer
            .encode(&p, req.add_special_tokens.unwrap_or(true)),
        (None, Some(m)) => s.tokenizer.encode(
            &render_messages(&s, m)?,
            req.add_special_tokens.unwrap_or(false),
        ),
        (None, None) => {
            return Err(ApiError::bad_request(
                "Either prompt or messages is required",
            ));
        }
    };
    Ok(json_response(
        StatusCode::OK,
        &TokenizeResponse {
            count: tokens.len(),
            max_model_len: s.cfg.profile.max_model_len,
            tokens: &tokens,
            token_strs: None,
        },
    ))
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

#[derive(Debug, Serialize)]
struct DetokenizeResponse {
    prompt: String,
}

async fn detokenize(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let req: DetokenizeRequest = parse(&body)?;
    let prompt = s.tokenizer.decode(&req.tokens).map_err(|bad| {
        ApiError::bad_request(format!("Token id {bad} is out of vocabulary")).with_param("tokens")
    })?;
    Ok(json_response(
        StatusCode::OK,
        &DetokenizeResponse { prompt },
    ))
}

#[derive(Debug, Serialize)]
struct Version {
    version: &'static str,
}

async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &Version {
            version: VLLM_VERSION,
        },
    )
}

#[derive(Debug, Serialize)]
struct Load {
    server_load: usize,
}

/// vLLM's `server_load`: requests in flight on the generation endpoints.
async fn load(State(s): State<Arc<Shared>>) -> Response {
    json_response(
        StatusCode::OK,
        &Load {
            server_load: s.in_flight.load(Ordering::Relaxed),
        },
    )
}

async fn ping() -> StatusCode {
    StatusCode::OK
}
