//! Prompt tokenization for KV-cache-aware routing and token accounting.
//!
//! Chat-template rendering, tokenization and the prompt-prefix cache are the
//! `kthena-tokenize` crate's (shared with the simulator): a model's Hugging Face
//! `tokenizer.json` is loaded in-process, chat requests are rendered with the model's chat
//! template (ChatML without one) and encoded without added special tokens, completion prompts
//! with them, as vLLM's `/tokenize` does, so the token ids are those the engine hashes into KV
//! blocks. Prefixes ending before a special token are cached in an LRU of
//! `tokenizeCacheEntries` entries, so a request that repeats a long system prompt only
//! tokenizes what follows it.
//!
//! When no tokenizer is configured for a model, the engine's `/tokenize` is asked instead
//! (vLLM and SGLang request shapes, plus llama.cpp's `content` key).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
pub use kthena_openai::remote_body;
use kthena_openai::{Message, ParsedRequest, Prompt};
pub use kthena_tokenize::{CacheOutcome, MIN_CACHED_PREFIX_BYTES};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::kv::metrics::KvMetrics;
use crate::scrape::HttpClient;

/// Texts longer than this many bytes are tokenized on the blocking thread pool instead of
/// the request's runtime thread.
pub const BLOCKING_THRESHOLD_BYTES: usize = 16 * 1024;

/// Largest `/tokenize` answer read, bytes.
const MAX_TOKENIZE_BYTES: usize = 16 * 1024 * 1024;

/// One model's tokenizer, chat template and prompt-prefix cache.
#[derive(Debug)]
pub struct ModelTokenizer {
    model: String,
    tok: kthena_tokenize::Tokenizer,
}

// === impl ModelTokenizer ===

impl ModelTokenizer {
    /// Loads `tokenizer_json` and, when given, the chat template and BOS/EOS strings of
    /// `tokenizer_config`. The prefix cache holds at most `cache_entries` prefixes (0 turns
    /// it off).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when a file cannot be read or parsed, or the template does not
    /// compile.
    pub fn load(
        model: &str,
        tokenizer_json: &Path,
        tokenizer_config: Option<&Path>,
        cache_entries: usize,
    ) -> Result<Self> {
        let tok = kthena_tokenize::Tokenizer::load(tokenizer_json, tokenizer_config, cache_entries)
            .map_err(|e| tokenizer_error(model, &e))?;
        Ok(Self {
            model: model.to_owned(),
            tok,
        })
    }

    /// The model this tokenizer is configured for.
    #[must_use]
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Whether a chat template was loaded.
    #[must_use]
    pub fn has_chat_template(&self) -> bool {
        self.tok.has_chat_template()
    }

    /// Renders chat messages into the prompt text the engine sees, with the generation
    /// prompt appended (`add_generation_prompt=True`).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the template fails (for example `raise_exception`).
    pub fn render_chat(&self, messages: &[Message]) -> Result<String> {
        // As `(role, content)` pairs: the router may not implement kthena-tokenize's
        // `ChatMessage` for kthena-openai's `Message` (both are foreign here).
        let pairs: Vec<(&str, &str)> = (messages.iter())
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        self.tok
            .render_chat(&pairs)
            .map_err(|e| tokenizer_error(&self.model, &e))
    }

    /// Token ids of `text` without the prefix cache (the reference result).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the tokenizer fails.
    pub fn encode_uncached(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.tok
            .encode_uncached(text, add_special_tokens)
            .map_err(|e| tokenizer_error(&self.model, &e))
    }

    /// Token ids of `text`, reusing the longest cached prefix; the result equals
    /// [`encode_uncached`](Self::encode_uncached).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the tokenizer fails.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<(Vec<u32>, CacheOutcome)> {
        self.tok
            .encode(text, add_special_tokens)
            .map_err(|e| tokenizer_error(&self.model, &e))
    }

    /// Renders (for chat) and tokenizes a prompt; chat prompts without added special tokens,
    /// completion prompts with them.
    ///
    /// # Errors
    /// As [`render_chat`](Self::render_chat) and [`encode`](Self::encode).
    pub fn tokenize_prompt(&self, prompt: &Prompt) -> Result<(Vec<u32>, CacheOutcome)> {
        match prompt {
            Prompt::Text(t) => self.encode(t, true),
            Prompt::Messages(m) => {
                let text = self.render_chat(m)?;
                self.encode(&text, false)
            }
        }
    }
}

/// The router's error for a tokenizer failure, with the crate error's causes in the reason.
fn tokenizer_error(model: &str, e: &kthena_tokenize::Error) -> Error {
    let reason = kthena_api::error_chain(e);
    Error::Tokenizer {
        model: model.to_owned(),
        reason,
    }
}

/// The configured tokenizers by model name, plus the remote fallback settings.
#[derive(Debug, Default)]
pub struct Tokenizers {
    by_model: HashMap<String, Arc<ModelTokenizer>>,
    /// Ask the engine's `/tokenize` when no tokenizer is configured for the model.
    pub remote: bool,
    /// Timeout of one remote `/tokenize` call.
    pub remote_timeout: Duration,
}

impl Tokenizers {
    /// A set from loaded tokenizers.
    #[must_use]
    pub fn new(list: Vec<Arc<ModelTokenizer>>, remote: bool, remote_timeout: Duration) -> Self {
        Self {
            by_model: list.into_iter().map(|t| (t.model.clone(), t)).collect(),
            remote,
            remote_timeout,
        }
    }

    /// The tokenizer of the first of `models` that has one.
    #[must_use]
    pub fn get(&self, models: &[&str]) -> Option<&Arc<ModelTokenizer>> {
        models.iter().find_map(|m| self.by_model.get(*m))
    }

    /// Number of configured tokenizers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_model.len()
    }

    /// Whether no tokenizer is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_model.is_empty()
    }

    /// Token ids of `req`'s prompt: in-process when a tokenizer is configured for one of
    /// `models` (tried in order), else (when `remote_url` is given and the remote fallback is
    /// on) from that engine's `/tokenize`. `None` when neither works. Observes
    /// `kthena_router_tokenize_duration_seconds` and the prefix-cache counter. Prompts over
    /// [`BLOCKING_THRESHOLD_BYTES`] are tokenized on the blocking pool, or on this task when
    /// `inline` (a router on an in-memory network, where another thread would make the order
    /// of events depend on the machine).
    pub async fn tokens(
        &self,
        client: &HttpClient,
        metrics: &KvMetrics,
        models: &[&str],
        req: &Arc<ParsedRequest>,
        remote_url: Option<&str>,
        inline: bool,
    ) -> Option<Vec<u32>> {
        let started = Instant::now();
        let prompt = &req.prompt;
        if let Some(t) = self.get(models) {
            let big = match prompt {
                Prompt::Text(s) => s.len(),
                Prompt::Messages(m) => m.iter().map(|m| m.content.len()).sum(),
            } > BLOCKING_THRESHOLD_BYTES
                && !inline;
            let res = if big {
                // The request, not a copy of its prompt, goes to the blocking thread.
                let (t, r) = (Arc::clone(t), Arc::clone(req));
                tokio::task::spawn_blocking(move || t.tokenize_prompt(&r.prompt))
                    .await
                    .unwrap_or_else(|e| {
                        Err(Error::Tokenizer {
                            model: String::new(),
                            reason: format!("tokenizer task failed: {e}"),
                        })
                    })
            } else {
                t.tokenize_prompt(prompt)
            };
            metrics.tokenize("local", started.elapsed().as_secs_f64());
            return match res {
                Ok((ids, outcome)) => {
                    match outcome {
                        CacheOutcome::Hit { .. } => metrics.tokenize_cache(true),
                        CacheOutcome::Miss => metrics.tokenize_cache(false),
                        CacheOutcome::Uncacheable => {}
                    }
                    Some(ids)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "Local tokenization failed");
                    None
                }
            };
        }
        let url = remote_url.filter(|_| self.remote)?;
        let model = models.first().copied().unwrap_or_default();
        let res = remote_tokenize(client, url, model, prompt, self.remote_timeout).await;
        metrics.tokenize("remote", started.elapsed().as_secs_f64());
        match res {
            Ok(ids) => Some(ids),
            Err(reason) => {
                tracing::debug!(%url, %reason, "Remote tokenization failed");
                None
            }
        }
    }
}

/// Asks an engine's `POST {base_url}/tokenize` for the prompt's token ids.
///
/// # Errors
/// A reason for transport errors, timeouts, non-2xx answers and answers without a
/// `tokens` list of integers.
pub async fn remote_tokenize(
    client: &HttpClient,
    base_url: &str,
    model: &str,
    prompt: &Prompt,
    timeout: Duration,
) -> std::result::Result<Vec<u32>, String> {
    let body = remote_body(model, prompt).to_string();
    let req = http::Request::post(format!("{base_url}/tokenize"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(crate::body::ReqBody::from(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), MAX_TOKENIZE_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("/tokenize answered {status}"));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("invalid /tokenize answer: {e}"))?;
        let list = v
            .get("tokens")
            .and_then(|t| t.as_array())
            .ok_or("/tokenize answer has no tokens list")?;
        list.iter()
            .map(|t| {
                t.as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .ok_or_else(|| "token id is not a u32".to_owned())
            })
            .collect()
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("timed out after {timeout:?}"))?
}
