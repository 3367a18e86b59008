//! Generation requests: parsing and validating completions and chat completions bodies into a
//! [`Gen`], with vLLM's error messages and defaults.

use axum::body::Bytes;
use http::StatusCode;
use serde_json::Value;

use super::body::{ApiError, parse};
use super::shared::Shared;
use super::wire::{ChatRequest, Common, CompletionRequest, Content, Message, PromptInput};
use crate::config::{Flavor, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Completions,
    Chat,
}

/// Everything a generation needs after validation.
pub(super) struct Gen {
    pub(super) api: Api,
    pub(super) id: String,
    pub(super) model: String,
    pub(super) prompt: Vec<u32>,
    pub(super) max_tokens: usize,
    pub(super) lora: Option<String>,
    pub(super) cache_salt: Option<String>,
    pub(super) stream: bool,
    pub(super) include_usage: bool,
    pub(super) seed: u64,
    pub(super) remote_prefill: bool,
    pub(super) remote_decode: bool,
    pub(super) bootstrap: Option<(u64, Option<String>)>,
}

impl std::fmt::Debug for Gen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gen")
            .field("id", &self.id)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

pub(super) fn completion_request(s: &Shared, body: &Bytes) -> Result<Gen, ApiError> {
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

pub(super) fn chat_request(s: &Shared, body: &Bytes) -> Result<Gen, ApiError> {
    let req: ChatRequest = parse(body)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request("messages must not be empty").with_param("messages"));
    }
    let text = render_messages(s, req.messages)?;
    let prompt = s.tokenizer.encode(&text, false);
    prepare(s, Api::Chat, req.common, prompt)
}

/// Validates the fields shared by completions and chat completions against the engine and
/// the tokenized `prompt`, in vLLM's order of checks, and fills in the defaults.
pub(super) fn prepare(s: &Shared, api: Api, c: Common, prompt: Vec<u32>) -> Result<Gen, ApiError> {
    let lora = resolve_lora(s, &c.model)?;
    if c.n.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("Only n=1 is supported by this engine").with_param("n"));
    }
    let max_tokens = max_tokens(s, api, c.max_completion_tokens.or(c.max_tokens), &prompt)?;
    let (remote_prefill, remote_decode, bootstrap) = pd_params(s, &c);
    let include_usage = c.stream_options.is_some_and(|o| o.include_usage);
    Ok(Gen {
        api,
        id: s.request_id(if api == Api::Chat { "chatcmpl" } else { "cmpl" }),
        model: c.model,
        prompt,
        max_tokens,
        lora,
        cache_salt: c.cache_salt,
        stream: c.stream.unwrap_or(false),
        include_usage,
        seed: c.seed.unwrap_or(0),
        remote_prefill,
        remote_decode,
        bootstrap,
    })
}

/// The LoRA adapter a request's `model` names: `None` for the base model, 404 for a name
/// that is neither the base model nor a loaded adapter.
pub(super) fn resolve_lora(s: &Shared, model: &str) -> Result<Option<String>, ApiError> {
    if model == s.cfg.model {
        Ok(None)
    } else if s
        .loras
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains_key(model)
    {
        Ok(Some(model.to_owned()))
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("The model `{model}` does not exist."),
        )
        .with_param("model"))
    }
}

/// The number of tokens to generate: `requested` (`max_completion_tokens`, else
/// `max_tokens`) checked against the room the prompt leaves in the context, or the default
/// (16 for completions as in vLLM, the engine's `default_max_tokens` for chat) capped to it.
/// An empty prompt, or one that leaves no room, is a 400.
fn max_tokens(
    s: &Shared,
    api: Api,
    requested: Option<usize>,
    prompt: &[u32],
) -> Result<usize, ApiError> {
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
    match requested {
        Some(0) => Err(
            ApiError::bad_request("max_tokens must be at least 1, got 0.").with_param("max_tokens"),
        ),
        Some(m) if m > room => Err(ApiError::bad_request(format!(
            "'max_tokens' or 'max_completion_tokens' is too large: {m}. This model's maximum context length is {max_len} tokens and your request has {} input tokens ({m} > {max_len} - {}). (parameter=max_tokens, value={m})",
            prompt.len(),
            prompt.len()
        ))
        .with_param("max_tokens")),
        Some(m) => Ok(m),
        None if api == Api::Completions => Ok(16.min(room)),
        None => Ok(s.cfg.default_max_tokens.min(room)),
    }
}

/// The P/D disaggregation parameters of a request: vLLM's `kv_transfer_params` flags
/// (`do_remote_prefill`, `do_remote_decode`) and SGLang's bootstrap room and host (SGLang
/// flavour only; a decode engine given a room prefills remotely).
fn pd_params(s: &Shared, c: &Common) -> (bool, bool, Option<(u64, Option<String>)>) {
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
    (remote_prefill, remote_decode, bootstrap)
}

/// Renders chat messages with the model's template (or ChatML); template errors are 400s.
pub(super) fn render_messages(s: &Shared, messages: Vec<Message>) -> Result<String, ApiError> {
    s.tokenizer
        .render_chat(&flatten_messages(messages))
        .map_err(|e| ApiError::bad_request(e).with_param("messages"))
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
