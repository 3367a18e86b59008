//! The HTTP API: vLLM's OpenAI-compatible server surface (response shapes from the captured
//! vLLM 0.32 samples in `spec/samples/vllm-0.32-cpu/`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use http::{HeaderValue, StatusCode, header};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use crate::config::{Config, Faults, Flavor, Role};
use crate::engine::{Command, Finished, Output, Submit};
use crate::metrics::Metrics;
use crate::tokenize::Tokenizer;

mod responses;
mod serving;
mod wire;

use wire::*;

/// `system_fingerprint` of every response.
const FINGERPRINT: &str = "vllm-0.32.0-kthena-sim";

/// State shared by all handlers.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cfg: Config,
    pub(crate) addr: SocketAddr,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) engine: mpsc::UnboundedSender<Command>,
    /// Loaded LoRA adapters: name -> path.
    pub(crate) loras: Mutex<BTreeMap<String, String>>,
    pub(crate) faults: ArcSwap<Faults>,
    pub(crate) fault_rng: Mutex<SmallRng>,
    pub(crate) created: u64,
    /// Random per engine instance (from the OS), so request ids differ between engines and
    /// between restarts even with the same seed and port.
    pub(crate) id_nonce: u64,
    pub(crate) next_id: AtomicU64,
    /// Generation requests in flight (for graceful shutdown).
    pub(crate) in_flight: AtomicUsize,
    pub(crate) idle: Notify,
    /// SGLang prefill side: bootstrap rooms whose prefill finished.
    pub(crate) rooms_done: Mutex<Vec<u64>>,
    pub(crate) room_notify: Notify,
}

impl Shared {
    /// `<prefix>-` and 32 hex digits, like vLLM's `cmpl-<uuid4 hex>`: the engine's random
    /// nonce, then a counter scrambled into a distinct value per request.
    fn request_id(&self, prefix: &str) -> String {
        self.request_id_sep(prefix, '-')
    }

    /// As [`Shared::request_id`] with another separator (the Responses API's ids are
    /// `resp_...` and `msg_...`).
    fn request_id_sep(&self, prefix: &str, sep: char) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mix = n.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        format!("{prefix}{sep}{:016x}{mix:016x}", self.id_nonce)
    }

    fn engine_id(&self) -> String {
        format!("kthena-sim-{}", self.addr)
    }
}

/// Counts a request in flight until dropped.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(s: &Arc<Shared>) -> Self {
        s.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(s))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

// === errors ===

/// An error in vLLM's JSON shape: `{"error":{"message","type","param","code"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn with_param(mut self, p: &str) -> Self {
        self.param = Some(p.to_owned());
        self
    }

    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 => "BadRequestError",
            401 => "AuthenticationError",
            404 => "NotFoundError",
            // vLLM answers HTTP-level errors with the reason phrase as the type.
            413 => "Request Entity Too Large",
            429 => "RateLimitError",
            500 => "InternalServerError",
            503 => "ServiceUnavailableError",
            _ => "APIError",
        }
    }
}

/// vLLM's error body, fields in vLLM's order.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: u16,
}

/// `/tokenize` response, fields in vLLM's order.
#[derive(Serialize)]
struct TokenizeResponse<'a> {
    count: usize,
    max_model_len: usize,
    tokens: &'a [u32],
    token_strs: Option<Vec<String>>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind(),
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        };
        json_response(self.status, &body)
    }
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A request body read up to the engine's `max_body_bytes`; a larger one is answered 413 in
/// vLLM's error shape (axum's own rejection is plain text).
#[derive(Debug)]
struct RawBody(Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(Self)
            .map_err(|r| {
                let status = r.status();
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(status, "Request body is larger than the server's limit.")
                } else {
                    ApiError::new(
                        status,
                        format!("Cannot read the request body: {}", r.body_text()),
                    )
                }
            })
    }
}

fn parse<T: for<'de> Deserialize<'de>>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}")))
}

// === router ===

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses::create))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/tokenize", post(tokenize))
        .route("/metrics", get(metrics))
        .route("/v1/load_lora_adapter", post(load_lora))
        .route("/v1/unload_lora_adapter", post(unload_lora))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .route("/bootstrap/{room}", get(bootstrap_wait))
        .merge(serving::routes())
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(
            shared.cfg.max_body_bytes,
        ))
        .with_state(shared)
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "Not Found")
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
struct TokenizeRequest {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    /// vLLM's default: true for prompts, false for messages.
    #[serde(default)]
    add_special_tokens: Option<bool>,
}

/// Renders chat messages with the model's template (or ChatML); template errors are 400s.
fn render_messages(s: &Shared, messages: Vec<Message>) -> Result<String, ApiError> {
    s.tokenizer
        .render_chat(&flatten_messages(messages))
        .map_err(|e| ApiError::bad_request(e).with_param("messages"))
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

/// SGLang bootstrap: answers once the prefill of `room` has finished here (long poll, up to
/// 30 s of wall time); 404 on timeout.
async fn bootstrap_wait(
    State(s): State<Arc<Shared>>,
    axum::extract::Path(room): axum::extract::Path<u64>,
) -> StatusCode {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let notified = s.room_notify.notified();
        if s.rooms_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&room)
        {
            return StatusCode::OK;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return StatusCode::NOT_FOUND;
        }
    }
}

fn text_ok(msg: String) -> Response {
    let mut resp = Response::new(Body::from(msg));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn flatten_messages(messages: Vec<Message>) -> Vec<(String, String)> {
    messages
        .into_iter()
        .map(|m| {
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => parts
                    .into_iter()
                    .filter_map(|p| p.text)
                    .collect::<Vec<_>>()
                    .join(""),
            };
            (m.role, content)
        })
        .collect()
}

// === generation ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Completions,
    Chat,
}

/// Everything a generation needs after validation.
struct Gen {
    api: Api,
    id: String,
    model: String,
    prompt: Vec<u32>,
    max_tokens: usize,
    lora: Option<String>,
    cache_salt: Option<String>,
    stream: bool,
    include_usage: bool,
    seed: u64,
    remote_prefill: bool,
    remote_decode: bool,
    bootstrap: Option<(u64, Option<String>)>,
}

async fn completions(State(s): State<Arc<Shared>>, RawBody(body): RawBody) -> Response {
    match completion_request(&s, &body) {
        Ok(g) => generate(s, g).await,
        Err(e) => e.into_response(),
    }
}

async fn chat_completions(State(s): State<Arc<Shared>>, RawBody(body): RawBody) -> Response {
    match chat_request(&s, &body) {
        Ok(g) => generate(s, g).await,
        Err(e) => e.into_response(),
    }
}

fn completion_request(s: &Shared, body: &Bytes) -> Result<Gen, ApiError> {
    let req: CompletionRequest = parse(body)?;
    let prompt = match req.prompt {
        PromptInput::Text(t) => s.tokenizer.encode(&t, true),
        PromptInput::Tokens(t) => t,
        PromptInput::Texts(mut v) if v.len() == 1 => s.tokenizer.encode(&v.remove(0), true),
        PromptInput::TokenLists(mut v) if v.len() == 1 => v.remove(0),
        PromptInput::Texts(_) | PromptInput::TokenLists(_) => {
            return Err(
                ApiError::bad_request("Batched prompts are not supported by this engine")
                    .with_param("prompt"),
            );
        }
    };
    prepare(s, Api::Completions, req.common, prompt)
}

fn chat_request(s: &Shared, body: &Bytes) -> Result<Gen, ApiError> {
    let req: ChatRequest = parse(body)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty").with_param("messages"));
    }
    let text = render_messages(s, req.messages)?;
    let prompt = s.tokenizer.encode(&text, false);
    prepare(s, Api::Chat, req.common, prompt)
}

fn prepare(s: &Shared, api: Api, c: Common, prompt: Vec<u32>) -> Result<Gen, ApiError> {
    let lora = if c.model == s.cfg.model {
        None
    } else if s
        .loras
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains_key(&c.model)
    {
        Some(c.model.clone())
    } else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("The model `{}` does not exist.", c.model),
        )
        .with_param("model"));
    };
    if c.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("Only n=1 is supported by this engine").with_param("n"));
    }
    if prompt.is_empty() {
        return Err(ApiError::bad_request("The prompt cannot be empty.").with_param("prompt"));
    }
    let max_len = s.cfg.profile.max_model_len;
    if prompt.len() > max_len {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {max_len} tokens. However, your prompt contains at least {} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value={})",
            prompt.len(),
            prompt.len()
        ))
        .with_param("input_tokens"));
    }
    let requested = c.max_completion_tokens.or(c.max_tokens);
    let room = max_len - prompt.len();
    if room == 0 && requested.is_none() {
        // Every request generates at least one token, so a prompt that fills the context is
        // refused even when the client asked for no particular output length.
        return Err(ApiError::bad_request(format!(
            "The decoder prompt (length {}) plus the number of requested output tokens (at least 1) is longer than the maximum model length of {max_len}. Make sure that `max_model_len` is no smaller than the number of text tokens plus the number of requested output tokens.",
            prompt.len()
        ))
        .with_param("input_tokens"));
    }
    let max_tokens = match requested {
        Some(0) => {
            return Err(
                ApiError::bad_request("max_tokens must be at least 1, got 0.")
                    .with_param("max_tokens"),
            );
        }
        Some(m) if m > room => {
            return Err(ApiError::bad_request(format!(
                "'max_tokens' or 'max_completion_tokens' is too large: {m}. This model's maximum context length is {max_len} tokens and your request has {} input tokens ({m} > {max_len} - {}). (parameter=max_tokens, value={m})",
                prompt.len(),
                prompt.len()
            ))
            .with_param("max_tokens"));
        }
        Some(m) => m,
        None if api == Api::Completions => 16.min(room),
        None => s.cfg.default_max_tokens.min(room),
    };
    let flag = |k: &str| {
        c.kv_transfer_params
            .as_ref()
            .and_then(|p| p.get(k))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let (mut remote_prefill, remote_decode) = (flag("do_remote_prefill"), flag("do_remote_decode"));
    let bootstrap = if s.cfg.flavor == Flavor::Sglang {
        c.bootstrap_room.map(|r| (r, c.bootstrap_host.clone()))
    } else {
        None
    };
    if bootstrap.is_some() && s.cfg.role == Role::Decode {
        remote_prefill = true;
    }
    let include_usage = c.stream_options.is_some_and(|o| o.include_usage);
    Ok(Gen {
        api,
        id: s.request_id(if api == Api::Chat { "chatcmpl" } else { "cmpl" }),
        model: c.model,
        prompt,
        max_tokens,
        lora,
        cache_salt: c.cache_salt,
        stream: c.stream,
        include_usage,
        seed: c.seed.unwrap_or(0),
        remote_prefill,
        remote_decode,
        bootstrap,
    })
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

/// Waits on the prefill peer for an SGLang bootstrap room (decode role).
async fn wait_bootstrap(s: &Shared, room: u64, host: Option<&str>) -> Result<(), ApiError> {
    let Some(host) = host else {
        return Err(ApiError::bad_request(
            "bootstrap_host is required with bootstrap_room on a decode engine",
        )
        .with_param("bootstrap_host"));
    };
    let addr = if host.contains(':')
        && !host.starts_with('[')
        && host.parse::<std::net::Ipv6Addr>().is_err()
    {
        host.to_owned()
    } else {
        format!("{host}:{}", s.addr.port())
    };
    let Ok(uri) = format!("http://{addr}/bootstrap/{room}").parse::<http::Uri>() else {
        return Err(
            ApiError::bad_request(format!("invalid bootstrap_host {host}"))
                .with_param("bootstrap_host"),
        );
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<Bytes>>();
    match client.get(uri).await {
        Ok(resp) if resp.status() == StatusCode::OK => Ok(()),
        Ok(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("bootstrap room {room} was not prefilled"),
        )),
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot reach bootstrap host {addr}: {e}"),
        )),
    }
}

/// Admits a generation: counts it in flight, applies injected faults and the first-byte
/// delay, waits for an SGLang bootstrap room (decode role), then submits it to the engine.
/// The receiver yields its tokens.
async fn submit(
    s: &Arc<Shared>,
    g: &Gen,
) -> Result<(InFlight, mpsc::UnboundedReceiver<Output>), Response> {
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
async fn collect(rx: &mut mpsc::UnboundedReceiver<Output>) -> Result<(String, Finished), ApiError> {
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

async fn generate(s: Arc<Shared>, g: Gen) -> Response {
    let (guard, mut rx) = match submit(&s, &g).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let created = unix_secs();
    if !g.stream {
        let (text, finished) = match collect(&mut rx).await {
            Ok(x) => x,
            Err(e) => return e.into_response(),
        };
        finish_pd(&s, &g);
        let kv = kv_transfer_out(&s, &g, &finished);
        drop(guard);
        return match g.api {
            Api::Completions => json_response(
                StatusCode::OK,
                &CompletionResponse {
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
                    usage: Usage::new(&finished, true),
                    kv_transfer_params: kv,
                    ec_transfer_params: None,
                    metrics: None,
                },
            ),
            Api::Chat => json_response(
                StatusCode::OK,
                &ChatResponse {
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
                    usage: Usage::new(&finished, true),
                    prompt_logprobs: None,
                    prompt_token_ids: None,
                    prompt_text: None,
                    kv_transfer_params: kv,
                    ec_transfer_params: None,
                    metrics: None,
                },
            ),
        };
    }
    // Streaming.
    let drop_after = s.faults.load().drop_after_chunks;
    let (body_tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let s2 = Arc::clone(&s);
    let producer = async move {
        let _guard = guard;
        let mut sent = 0u32;
        let send = |chunk: Result<Bytes, std::io::Error>| {
            let tx = body_tx.clone();
            async move { tx.send(chunk).await.is_ok() }
        };
        let mut frames: Vec<Bytes> = Vec::new();
        if g.api == Api::Chat {
            frames.push(sse(&Chunk {
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
            }));
        }
        // As vLLM (and SGLang) do, the chat role chunk leaves with the first token: a client
        // (or a router) sees the first body byte when the prefill is done.
        loop {
            let Some(Output { text, finished, .. }) = rx.recv().await else {
                let _ = send(Err(std::io::Error::other("engine stopped"))).await;
                return;
            };
            let choice = ChunkChoice {
                index: 0,
                delta: (g.api == Api::Chat).then(|| Delta {
                    role: None,
                    content: text.clone(),
                }),
                text: (g.api == Api::Completions).then(|| text.clone()),
                logprobs: None,
                finish_reason: finished.as_ref().map(|f| f.reason.as_str()),
                stop_reason: finished.as_ref().map(|_| None),
                token_ids: Some(None),
            };
            let object = if g.api == Api::Chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            frames.push(sse(&Chunk {
                id: &g.id,
                object,
                created,
                model: &g.model,
                choices: vec![choice],
                usage: None,
                system_fingerprint: None,
                prompt_token_ids: None,
                prompt_text: None,
                kv_transfer_params: None,
            }));
            let last = finished.is_some();
            if let Some(f) = finished {
                finish_pd(&s2, &g);
                let kv = kv_transfer_out(&s2, &g, &f);
                if g.include_usage || kv.is_some() {
                    frames.push(sse(&Chunk {
                        id: &g.id,
                        object,
                        created,
                        model: &g.model,
                        choices: Vec::new(),
                        usage: g.include_usage.then(|| Usage::new(&f, false)),
                        system_fingerprint: Some(FINGERPRINT),
                        prompt_token_ids: None,
                        prompt_text: None,
                        kv_transfer_params: kv,
                    }));
                }
                frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
            }
            for f in frames.drain(..) {
                if drop_after.is_some_and(|k| sent >= k) {
                    // Let the chunks already produced reach the socket, then abort.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = send(Err(std::io::Error::other("injected connection drop"))).await;
                    return;
                }
                if !send(Ok(f)).await {
                    return;
                }
                sent += 1;
            }
            if last {
                return;
            }
        }
    };
    let body_stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let stream = futures_util::stream::select(
        body_stream,
        futures_util::stream::once(producer)
            .filter_map(|()| async { None::<Result<Bytes, std::io::Error>> }),
    );
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    resp
}

fn sse(chunk: &impl Serialize) -> Bytes {
    let mut out = b"data: ".to_vec();
    let _ = serde_json::to_writer(&mut out, chunk);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// SGLang prefill side: marks the bootstrap room as done.
fn finish_pd(s: &Shared, g: &Gen) {
    if let Some((room, _)) = g.bootstrap
        && s.cfg.role != Role::Decode
    {
        let mut rooms = s
            .rooms_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rooms.push(room);
        if rooms.len() > 4096 {
            rooms.remove(0);
        }
        s.room_notify.notify_waiters();
    }
}

/// vLLM NIXL-style `kv_transfer_params` returned by a prefill that was asked to
/// `do_remote_decode`: the fields of vLLM's `NixlConnectorScheduler.request_finished`, in its
/// order.
#[derive(Debug, Serialize)]
struct KvTransferOut {
    do_remote_prefill: bool,
    do_remote_decode: bool,
    /// Physical ids of the prefill engine's KV blocks holding the prompt.
    remote_block_ids: Vec<u32>,
    remote_engine_id: String,
    remote_host: String,
    remote_port: u16,
    tp_size: u32,
}

fn kv_transfer_out(s: &Shared, g: &Gen, f: &Finished) -> Option<KvTransferOut> {
    if !g.remote_decode {
        return None;
    }
    Some(KvTransferOut {
        do_remote_prefill: true,
        do_remote_decode: false,
        remote_block_ids: f.block_ids.clone(),
        remote_engine_id: s.engine_id(),
        remote_host: s.addr.ip().to_string(),
        remote_port: s.addr.port(),
        tp_size: 1,
    })
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl std::fmt::Debug for Gen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gen")
            .field("id", &self.id)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// A random value from the operating system, for identifiers that must differ between
/// processes (not for anything the seed should reproduce). Falls back to the clock and the
/// process id if the OS generator fails.
pub(crate) fn os_random_u64() -> u64 {
    use rand::TryRngCore;
    rand::rngs::OsRng.try_next_u64().unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        (nanos as u64 ^ (u64::from(std::process::id()) << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    })
}

pub(crate) fn seeded_rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed ^ 0x5eed_fa17)
}
