//! The body of an engine's `POST /tokenize` request for a prompt: how a router that has no
//! local tokenizer for a model asks the engine for the prompt's token ids.

use serde_json::{Value, json};

use crate::Prompt;

#[cfg(test)]
mod tests;

/// The `/tokenize` request body for a prompt (Go Kthena's vLLM shape,
/// `pkg/kthena-router/scheduler/plugins/tokenization/vllm.go`; the `content` key makes
/// llama.cpp's `/tokenize` answer completion prompts too). A completion prompt is tokenized
/// with added special tokens, chat messages are rendered with the generation prompt and
/// without them, as vLLM does.
#[must_use]
pub fn remote_body(model: &str, prompt: &Prompt) -> Value {
    match prompt {
        Prompt::Text(t) => json!({
            "model": model, "prompt": t, "content": t, "add_special_tokens": true, "return_token_strs": false
        }),
        Prompt::Messages(m) => {
            let msgs: Vec<Value> = m
                .iter()
                .map(|m| json!({"role": m.role, "content": m.content}))
                .collect();
            json!({
                "model": model, "messages": msgs, "add_special_tokens": false,
                "add_generation_prompt": true, "return_token_strs": false
            })
        }
    }
}
