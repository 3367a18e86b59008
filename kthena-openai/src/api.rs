//! Which OpenAI-compatible API a request path is served by ([`Api::of_path`]): the one
//! decision of where a request's model and prompt are read from.
//!
//! Go Kthena hands every `/v1/*` request to its router (`cmd/kthena-router/app/router.go`:
//! `v1Group.Any("/*path", ...)`), which routes a JSON body with a `model` and a `prompt` or
//! `messages` (`pkg/kthena-router/utils/utils.go` `ParsePrompt`); here every `/v1/*` path
//! whose body names a model is an inference path. The paths below are vLLM's
//! OpenAI-compatible server's (`vllm/entrypoints/openai/api_server.py`). vLLM's paths outside `/v1/`
//! (`/tokenize`, `/detokenize`, `/pooling`, `/classify`, `/rerank`, `/v2/rerank`, `/score`)
//! are not inference paths, as in Go Kthena.

#[cfg(test)]
mod tests;

/// The API of an inference path, as far as the router reads its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `/v1/chat/completions`: prompt in `messages` (required).
    Chat,
    /// `/v1/messages` (Anthropic Messages): prompt in `messages` (required).
    Messages,
    /// `/v1/completions`: prompt in `prompt` (required).
    Completions,
    /// `/v1/responses`: prompt in `input` (required).
    Responses,
    /// `/v1/embeddings`: prompt in `input` (a string, strings, token ids or arrays of token
    /// ids), or `messages` (vLLM's chat embeddings); none is scheduled on load alone.
    Embeddings,
    /// `/v1/rerank`: prompt is `query` then `documents`.
    Rerank,
    /// `/v1/score`: prompt is `text_1` then `text_2` (or vLLM's `queries` then
    /// `documents`).
    Score,
    /// `/v1/audio/transcriptions` and `/v1/audio/translations`: a `multipart/form-data`
    /// body whose `model` is a form field; no prompt (scheduled on load alone).
    Audio,
    /// Any other `/v1/*` path: a JSON body with a `model`; the prompt is the first present
    /// of `prompt`, `messages`, `input` when one reads as a prompt, else none (scheduled on
    /// load alone).
    Other,
}

impl Api {
    /// The API of `path`, `None` for a path that is not an inference path: outside
    /// `/v1/`, `/v1/models` (the model list the router answers itself), vLLM's LoRA admin
    /// calls `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`.
    #[must_use]
    pub fn of_path(path: &str) -> Option<Self> {
        let api = match path {
            "/v1/chat/completions" => Self::Chat,
            "/v1/messages" => Self::Messages,
            "/v1/completions" => Self::Completions,
            "/v1/responses" => Self::Responses,
            "/v1/embeddings" => Self::Embeddings,
            "/v1/rerank" => Self::Rerank,
            "/v1/score" => Self::Score,
            "/v1/audio/transcriptions" | "/v1/audio/translations" => Self::Audio,
            "/v1/models" | "/v1/load_lora_adapter" | "/v1/unload_lora_adapter" => return None,
            p if p.starts_with("/v1/") && !p.starts_with("/v1/models/") => Self::Other,
            _ => return None,
        };
        Some(api)
    }

    /// The member the prompt is read from first: `messages` for chat and Messages, `prompt`
    /// for completions, `input` for Responses and embeddings; `None` for the others.
    #[must_use]
    pub fn prompt_member(self) -> Option<&'static str> {
        match self {
            Self::Chat | Self::Messages => Some("messages"),
            Self::Completions => Some("prompt"),
            Self::Responses | Self::Embeddings => Some("input"),
            Self::Rerank | Self::Score | Self::Audio | Self::Other => None,
        }
    }

    /// Whether a body without a prompt is refused (`Error::PromptNotFound`): the generation
    /// APIs (chat, Messages, completions, Responses). The others are scheduled on load
    /// alone when they carry none.
    #[must_use]
    pub fn requires_prompt(self) -> bool {
        matches!(
            self,
            Self::Chat | Self::Messages | Self::Completions | Self::Responses
        )
    }

    /// Whether the body is `multipart/form-data` rather than JSON.
    #[must_use]
    pub fn is_multipart(self) -> bool {
        self == Self::Audio
    }
}
