//! The wire shapes of the API: OpenAI request bodies as vLLM accepts them, and the response,
//! stream-chunk and model-list bodies as vLLM 0.32 writes them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::Finished;

// === request types ===

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct StreamOptions {
    #[serde(default)]
    pub(super) include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub(super) struct ContentPart {
    #[serde(default)]
    pub(super) text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Message {
    pub(super) role: String,
    #[serde(default)]
    pub(super) content: Option<Content>,
}

/// Fields shared by completions and chat completions.
#[derive(Debug, Deserialize)]
pub(super) struct Common {
    pub(super) model: String,
    #[serde(default)]
    pub(super) max_tokens: Option<usize>,
    #[serde(default)]
    pub(super) max_completion_tokens: Option<usize>,
    /// `null` is as absent (vLLM's `Optional[bool]`).
    #[serde(default)]
    pub(super) stream: Option<bool>,
    #[serde(default)]
    pub(super) stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub(super) seed: Option<u64>,
    #[serde(default)]
    pub(super) n: Option<u32>,
    #[serde(default)]
    pub(super) kv_transfer_params: Option<Value>,
    #[serde(default)]
    pub(super) bootstrap_room: Option<u64>,
    #[serde(default)]
    pub(super) bootstrap_host: Option<String>,
    /// vLLM's `cache_salt`: an extra block-hash key of the prompt's first block.
    #[serde(default)]
    pub(super) cache_salt: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionRequest {
    #[serde(flatten)]
    pub(super) common: Common,
    pub(super) prompt: PromptInput,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChatRequest {
    #[serde(flatten)]
    pub(super) common: Common,
    pub(super) messages: Vec<Message>,
}

// === response types (field order as vLLM 0.32 writes them) ===

#[derive(Debug, Serialize)]
pub(super) struct Usage {
    pub(super) prompt_tokens: usize,
    pub(super) total_tokens: usize,
    pub(super) completion_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) prompt_tokens_details: Option<Option<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) completion_tokens_details: Option<Option<Value>>,
}

impl Usage {
    pub(super) fn new(f: &Finished, details: bool) -> Self {
        Self {
            prompt_tokens: f.prompt_tokens,
            total_tokens: f.prompt_tokens + f.completion_tokens,
            completion_tokens: f.completion_tokens,
            prompt_tokens_details: details.then_some(None),
            completion_tokens_details: details.then_some(None),
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct CompletionChoice {
    pub(super) index: u32,
    pub(super) text: String,
    pub(super) logprobs: Option<Value>,
    pub(super) finish_reason: Option<&'static str>,
    pub(super) stop_reason: Option<Value>,
    pub(super) token_ids: Option<Vec<u32>>,
    pub(super) prompt_logprobs: Option<Value>,
    pub(super) prompt_token_ids: Option<Vec<u32>>,
    pub(super) routed_experts: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(super) struct CompletionResponse {
    pub(super) id: String,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) choices: Vec<CompletionChoice>,
    pub(super) service_tier: Option<Value>,
    pub(super) system_fingerprint: &'static str,
    pub(super) usage: Usage,
    pub(super) kv_transfer_params: Option<KvTransferOut>,
    pub(super) ec_transfer_params: Option<Value>,
    pub(super) metrics: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(super) struct ChatMessage {
    pub(super) role: &'static str,
    pub(super) content: String,
    pub(super) refusal: Option<Value>,
    pub(super) annotations: Option<Value>,
    pub(super) audio: Option<Value>,
    pub(super) function_call: Option<Value>,
    pub(super) reasoning: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(super) struct ChatChoice {
    pub(super) index: u32,
    pub(super) message: ChatMessage,
    pub(super) logprobs: Option<Value>,
    pub(super) finish_reason: Option<&'static str>,
    pub(super) stop_reason: Option<Value>,
    pub(super) token_ids: Option<Vec<u32>>,
    pub(super) routed_experts: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(super) struct ChatResponse {
    pub(super) id: String,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) choices: Vec<ChatChoice>,
    pub(super) service_tier: Option<Value>,
    pub(super) system_fingerprint: &'static str,
    pub(super) usage: Usage,
    pub(super) prompt_logprobs: Option<Value>,
    pub(super) prompt_token_ids: Option<Vec<u32>>,
    pub(super) prompt_text: Option<String>,
    pub(super) kv_transfer_params: Option<KvTransferOut>,
    pub(super) ec_transfer_params: Option<Value>,
    pub(super) metrics: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(super) struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) role: Option<&'static str>,
    pub(super) content: String,
}

#[derive(Debug, Serialize)]
pub(super) struct ChunkChoice {
    pub(super) index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) delta: Option<Delta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) text: Option<String>,
    pub(super) logprobs: Option<Value>,
    pub(super) finish_reason: Option<&'static str>,
    /// Present (as null) on the finishing chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stop_reason: Option<Option<Value>>,
    /// Present (as null) on token chunks, absent on the chat role chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) token_ids: Option<Option<Vec<u32>>>,
}

#[derive(Debug, Serialize)]
pub(super) struct Chunk<'a> {
    pub(super) id: &'a str,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) model: &'a str,
    pub(super) choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) system_fingerprint: Option<&'static str>,
    /// vLLM writes `"prompt_token_ids":null,"prompt_text":null` on the first chat chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) prompt_token_ids: Option<Option<Vec<u32>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) prompt_text: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) kv_transfer_params: Option<KvTransferOut>,
}

/// vLLM NIXL-style `kv_transfer_params` returned by a prefill that was asked to
/// `do_remote_decode`: the fields of vLLM's `NixlConnectorScheduler.request_finished`, in its
/// order.
#[derive(Debug, Serialize)]
pub(super) struct KvTransferOut {
    pub(super) do_remote_prefill: bool,
    pub(super) do_remote_decode: bool,
    /// Physical ids of the prefill engine's KV blocks holding the prompt.
    pub(super) remote_block_ids: Vec<u32>,
    pub(super) remote_engine_id: String,
    pub(super) remote_host: String,
    pub(super) remote_port: u16,
    pub(super) tp_size: u32,
}

#[derive(Debug, Serialize)]
pub(super) struct Permission {
    pub(super) id: String,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) allow_create_engine: bool,
    pub(super) allow_sampling: bool,
    pub(super) allow_logprobs: bool,
    pub(super) allow_search_indices: bool,
    pub(super) allow_view: bool,
    pub(super) allow_fine_tuning: bool,
    pub(super) organization: &'static str,
    pub(super) group: Option<String>,
    pub(super) is_blocking: bool,
}

#[derive(Debug, Serialize)]
pub(super) struct ModelCard {
    pub(super) id: String,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) owned_by: &'static str,
    pub(super) root: String,
    pub(super) parent: Option<String>,
    pub(super) max_model_len: usize,
    pub(super) permission: Vec<Permission>,
}

#[derive(Debug, Serialize)]
pub(super) struct ModelList {
    pub(super) object: &'static str,
    pub(super) data: Vec<ModelCard>,
}
