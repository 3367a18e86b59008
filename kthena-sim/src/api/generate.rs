//! Generation: admitting a request (injected faults, first-byte delay, P/D bootstrap),
//! submitting it to the engine, and answering with a whole JSON body or an SSE stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use rand::Rng;
use tokio::sync::mpsc;

use super::body::{ApiError, RawBody, json_response, sse, sse_response};
use super::pd::{finish_pd, kv_transfer_out, wait_bootstrap};
use super::request::{Api, Gen, chat_request, completion_request};
use super::shared::{FINGERPRINT, InFlight, Shared, unix_secs};
use super::wire::{
    ChatChoice, ChatMessage, ChatResponse, Chunk, ChunkChoice, CompletionChoice,
    CompletionResponse, Delta, KvTransferOut, Usage,
};
use crate::config::Role;
use crate::engine::{Command, Finished, Output, Submit};

/// `POST /v1/completions`.
pub(super) async fn completions(State(s): State<Arc<Shared>>, RawBody(body): RawBody) -> Response {
    match completion_request(&s, &body) {
        Ok(g) => generate(s, g).await,
        Err(e) => e.into_response(),
    }
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat_completions(
    State(s): State<Arc<Shared>>,
    RawBody(body): RawBody,
) -> Response {
    match chat_request(&s, &body) {
        Ok(g) => generate(s, g).await,
        Err(e) => e.into_response(),
    }
}

/// Picks an injected fault status, if the dice say so.
fn injected_error(s: &Shared) -> Option<StatusCode> {
    let faults = s.faults.load();
    if faults.error_rate <= 0.0 {
        return None;
    }
    let mut rng = s
        .fault_rng
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if rng.random::<f64>() >= faults.error_rate {
        return None;
    }
    let code = faults.error_codes[rng.random_range(0..faults.error_codes.len())];
    StatusCode::from_u16(code).ok()
}

/// Admits a generation: counts it in flight, applies injected faults and the first-byte
/// delay, waits for an SGLang bootstrap room (decode role), then submits it to the engine.
/// The receiver yields its tokens.
pub(super) async fn submit(
    s: &Arc<Shared>,
    g: &Gen,
) -> Result<(InFlight, mpsc::UnboundedReceiver<Output>), Response> {
    if s.draining.load(Ordering::SeqCst) {
        // vLLM with `--shutdown-timeout`: new requests are rejected once shutdown began.
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The server is shutting down",
        )
        .into_response());
    }
    let guard = InFlight::new(s);
    if let Some(status) = injected_error(s) {
        return Err(ApiError::new(status, format!("Injected fault: {status}")).into_response());
    }
    let delay = s.faults.load().first_byte_delay_ms;
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    if let Some((room, host)) = &g.bootstrap
        && s.cfg.role == Role::Decode
    {
        wait_bootstrap(s, *room, host.as_deref())
            .await
            .map_err(IntoResponse::into_response)?;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let submit = Submit {
        prompt: g.prompt.clone(),
        max_tokens: g.max_tokens,
        lora: g.lora.clone(),
        cache_salt: g.cache_salt.clone(),
        remote_prefill: g.remote_prefill,
        seed: g.seed,
        tx,
    };
    if s.engine.send(Command::Submit(submit)).is_err() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The engine is shutting down",
        )
        .into_response());
    }
    Ok((guard, rx))
}

/// Collects every token of a non-streaming generation: the text and the summary.
pub(super) async fn collect(
    rx: &mut mpsc::UnboundedReceiver<Output>,
) -> Result<(String, Finished), ApiError> {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Output {
                text: t, finished, ..
            }) => {
                text.push_str(&t);
                if let Some(f) = finished {
                    return Ok((text, f));
                }
            }
            None => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The engine stopped",
                ));
            }
        }
    }
}

/// Runs a validated generation and answers it: one JSON body, or an SSE stream when the
/// request asked for `stream`.
async fn generate(s: Arc<Shared>, g: Gen) -> Response {
    let (guard, mut rx) = match submit(&s, &g).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let created = unix_secs();
    if g.stream {
        return stream_response(s, g, guard, rx, created);
    }
    let (text, finished) = match collect(&mut rx).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    finish_pd(&s, &g);
    let kv = kv_transfer_out(&s, &g, &finished);
    drop(guard);
    match g.api {
        Api::Completions => json_response(
            StatusCode::OK,
            &completion_body(g, created, text, &finished, kv),
        ),
        Api::Chat => json_response(StatusCode::OK, &chat_body(g, created, text, &finished, kv)),
    }
}

/// The `text_completion` body of a finished non-streaming completion.
fn completion_body(
    g: Gen,
    created: u64,
    text: String,
    finished: &Finished,
    kv: Option<KvTransferOut>,
) -> CompletionResponse {
    CompletionResponse {
        id: g.id,
        object: "text_completion",
        created,
        model: g.model,
        choices: vec![CompletionChoice {
            index: 0,
            text,
            logprobs: None,
            finish_reason: Some(finished.reason.as_str()),
            stop_reason: None,
            token_ids: None,
            prompt_logprobs: None,
            prompt_token_ids: None,
            routed_experts: None,
        }],
        service_tier: None,
        system_fingerprint: FINGERPRINT,
        usage: Usage::new(finished, true),
        kv_transfer_params: kv,
        ec_transfer_params: None,
        metrics: None,
    }
}

/// The `chat.completion` body of a finished non-streaming chat completion.
fn chat_body(
    g: Gen,
    created: u64,
    text: String,
    finished: &Finished,
    kv: Option<KvTransferOut>,
) -> ChatResponse {
    ChatResponse {
        id: g.id,
        object: "chat.completion",
        created,
        model: g.model,
        choices: vec![ChatChoice {
            index: 0,
            message: ChatMessage {
                role: "assistant",
                content: text,
                refusal: None,
                annotations: None,
                audio: None,
                function_call: None,
                reasoning: None,
            },
            logprobs: None,
            finish_reason: Some(finished.reason.as_str()),
            stop_reason: None,
            token_ids: None,
            routed_experts: None,
        }],
        service_tier: None,
        system_fingerprint: FINGERPRINT,
        usage: Usage::new(finished, true),
        prompt_logprobs: None,
        prompt_token_ids: None,
        prompt_text: None,
        kv_transfer_params: kv,
        ec_transfer_params: None,
        metrics: None,
    }
}

/// An SSE response whose frames `produce` writes as the engine emits tokens.
fn stream_response(
    s: Arc<Shared>,
    g: Gen,
    guard: InFlight,
    rx: mpsc::UnboundedReceiver<Output>,
    created: u64,
) -> Response {
    let (body_tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let sink = FrameSink {
        tx: body_tx,
        sent: 0,
        drop_after: s.faults.load().drop_after_chunks,
    };
    sse_response(body_rx, produce(s, g, guard, rx, created, sink))
}

/// Where a stream's frames go: the response body, with the injected connection drop.
struct FrameSink {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    /// Frames sent so far.
    sent: u32,
    /// `Faults::drop_after_chunks`: the stream is cut after this many frames.
    drop_after: Option<u32>,
}

impl FrameSink {
    /// Sends `frames` in order; false once the stream is over (the client went away, or the
    /// injected drop cut it).
    async fn send_all(&mut self, frames: &mut Vec<Bytes>) -> bool {
        for f in frames.drain(..) {
            if self.drop_after.is_some_and(|k| self.sent >= k) {
                // Let the chunks already produced reach the socket, then abort.
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.fail("injected connection drop").await;
                return false;
            }
            if self.tx.send(Ok(f)).await.is_err() {
                return false;
            }
            self.sent += 1;
        }
        true
    }

    /// Ends the body with an error (the client sees the connection cut).
    async fn fail(&self, msg: &'static str) {
        let _ = self.tx.send(Err(std::io::Error::other(msg))).await;
    }
}

/// Writes a generation's SSE frames: the chat role chunk, one chunk per engine output, then
/// the usage (or `kv_transfer_params`) chunk and `[DONE]`.
async fn produce(
    s: Arc<Shared>,
    g: Gen,
    guard: InFlight,
    mut rx: mpsc::UnboundedReceiver<Output>,
    created: u64,
    mut sink: FrameSink,
) {
    let _guard = guard;
    let mut frames: Vec<Bytes> = Vec::new();
    if g.api == Api::Chat {
        frames.push(role_chunk(&g, created));
    }
    // As vLLM (and SGLang) do, the chat role chunk leaves with the first token: a client
    // (or a router) sees the first body byte when the prefill is done.
    loop {
        let Some(Output { text, finished, .. }) = rx.recv().await else {
            sink.fail("engine stopped").await;
            return;
        };
        frames.push(token_chunk(&g, created, text, finished.as_ref()));
        let last = finished.is_some();
        if let Some(f) = finished {
            push_finish(&s, &g, created, &f, &mut frames);
        }
        if !sink.send_all(&mut frames).await || last {
            return;
        }
    }
}

/// The `object` of a stream chunk.
fn chunk_object(api: Api) -> &'static str {
    if api == Api::Chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    }
}

/// The first chat chunk: the assistant role and empty content.
fn role_chunk(g: &Gen, created: u64) -> Bytes {
    sse(&Chunk {
        id: &g.id,
        object: "chat.completion.chunk",
        created,
        model: &g.model,
        choices: vec![ChunkChoice {
            index: 0,
            delta: Some(Delta {
                role: Some("assistant"),
                content: String::new(),
            }),
            text: None,
            logprobs: None,
            finish_reason: None,
            stop_reason: None,
            token_ids: None,
        }],
        usage: None,
        system_fingerprint: None,
        prompt_token_ids: Some(None),
        prompt_text: Some(None),
        kv_transfer_params: None,
    })
}

/// The chunk of one engine output: its text, and the finish reason on the last one.
fn token_chunk(g: &Gen, created: u64, text: String, finished: Option<&Finished>) -> Bytes {
    let (delta, text) = if g.api == Api::Chat {
        let delta = Delta {
            role: None,
            content: text,
        };
        (Some(delta), None)
    } else {
        (None, Some(text))
    };
    let choice = ChunkChoice {
        index: 0,
        delta,
        text,
        logprobs: None,
        finish_reason: finished.map(|f| f.reason.as_str()),
        stop_reason: finished.map(|_| None),
        token_ids: Some(None),
    };
    sse(&Chunk {
        id: &g.id,
        object: chunk_object(g.api),
        created,
        model: &g.model,
        choices: vec![choice],
        usage: None,
        system_fingerprint: None,
        prompt_token_ids: None,
        prompt_text: None,
        kv_transfer_params: None,
    })
}

/// After the last output: the P/D bookkeeping, the usage (or `kv_transfer_params`) chunk if
/// asked for, and `[DONE]`.
fn push_finish(s: &Shared, g: &Gen, created: u64, f: &Finished, frames: &mut Vec<Bytes>) {
    finish_pd(s, g);
    let kv = kv_transfer_out(s, g, f);
    if g.include_usage || kv.is_some() {
        frames.push(sse(&Chunk {
            id: &g.id,
            object: chunk_object(g.api),
            created,
            model: &g.model,
            choices: Vec::new(),
            usage: g.include_usage.then(|| Usage::new(f, false)),
            system_fingerprint: Some(FINGERPRINT),
            prompt_token_ids: None,
            prompt_text: None,
            kv_transfer_params: kv,
        }));
    }
    frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
}
