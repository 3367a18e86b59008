//! The HTTP API: vLLM's OpenAI-compatible server surface (response shapes from the captured
//! vLLM 0.32 samples in `spec/samples/vllm-0.32-cpu/`).
//!
//! The modules, leaves first: `shared` (the handlers' state), `body` (error shape and body
//! helpers), `wire` (request and response shapes), `request` (validation into a generation),
//! `pd` (prefill/decode disaggregation), `generate` (completions and chat completions),
//! `responses` (the Responses API), `pooling` (embeddings, rerank, score), `audio`
//! (transcriptions and translations), `serving` (render, tokenize and the small vLLM endpoints)
//! and `admin` (health, metrics, models, LoRA). Each imports only the ones before it.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

mod admin;
mod audio;
mod body;
mod generate;
mod pd;
mod pooling;
mod request;
mod responses;
mod serving;
mod shared;
mod wire;

pub(crate) use shared::{Shared, os_random_u64, seeded_rng};

/// The engine's HTTP routes, with the request body limit of `shared.cfg.max_body_bytes`.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/completions", post(generate::completions))
        .route("/v1/chat/completions", post(generate::chat_completions))
        .route("/v1/responses", post(responses::create))
        .merge(admin::routes())
        .route("/bootstrap/{room}", get(pd::bootstrap_wait))
        .merge(serving::routes())
        .merge(pooling::routes())
        .merge(audio::routes())
        .fallback(admin::not_found)
        .layer(axum::extract::DefaultBodyLimit::max(
            shared.cfg.max_body_bytes,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            admin::while_loading,
        ))
        .with_state(shared)
}
