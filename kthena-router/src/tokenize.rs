//! Prompt tokenization for KV-cache-aware routing and token accounting.
//!
//! A model's Hugging Face `tokenizer.json` is loaded in-process with the `tokenizers` crate;
//! chat requests are rendered with the model's chat template (`chat_template` of
//! `tokenizer_config.json`, evaluated with `minijinja` plus its Python-compatible string
//! methods, `trim_blocks` and `lstrip_blocks` on, as Hugging Face renders it), so the token ids
//! are those the engine computes and hashes into KV blocks. Without a template, messages are
//! rendered in ChatML (`<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
//! `<|im_start|>assistant\n`). Chat prompts are encoded without added special tokens and
//! completion prompts with them, as vLLM's `/tokenize` does.
//!
//! # Prompt-prefix cache
//!
//! Tokenizers split the text at special tokens (`<|im_start|>`, ...) before anything else, so
//! the ids of a text are the concatenation of the ids of its pieces when it is cut just before
//! a special token. [`ModelTokenizer::encode`] cuts there, keys each prefix ending at a cut by
//! a chained XXH3-64 hash of its pieces, and keeps the ids of such prefixes (at least
//! [`MIN_CACHED_PREFIX_BYTES`] long) in an LRU of `tokenizeCacheEntries` entries. A request
//! that repeats a long system prompt then only tokenizes what follows the longest cached
//! prefix. Texts without special tokens (plain completion prompts) are not cached.
//!
//! When no tokenizer is configured for a model, the engine's `/tokenize` is asked instead
//! (vLLM and SGLang request shapes, plus llama.cpp's `content` key).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use lru::LruCache;
use tokio::time::Instant;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::{Error, Result};
use crate::kv_metrics::KvMetrics;
use crate::openai::{Message, Prompt};
use crate::scrape::HttpClient;

/// Prefixes shorter than this many bytes are not cached (tokenizing them is cheap).
pub const MIN_CACHED_PREFIX_BYTES: usize = 256;

/// Texts longer than this many bytes are tokenized on the blocking thread pool instead of
/// the request's runtime thread.
pub const BLOCKING_THRESHOLD_BYTES: usize = 16 * 1024;

/// Largest `/tokenize` answer read, bytes.
const MAX_TOKENIZE_BYTES: usize = 16 * 1024 * 1024;

/// Whether [`ModelTokenizer::encode`] reused a cached prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A cached prefix of this many bytes was reused.
    Hit {
        /// Length of the reused prefix, bytes of the text.
        prefix_bytes: usize,
    },
    /// Nothing was reused.
    Miss,
    /// The text has no cut point; the cache was not consulted.
    Uncacheable,
}

/// A cached prefix: its length in bytes (checked on lookup) and its token ids.
type CachedPrefix = (usize, Arc<[u32]>);

struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos: String,
    eos: String,
}

/// One model's tokenizer, chat template and prompt-prefix cache.
pub struct ModelTokenizer {
    model: String,
    tok: tokenizers::Tokenizer,
    template: Option<ChatTemplate>,
    /// Matches the special tokens the text may be cut before.
    cuts: Option<regex::Regex>,
    /// Ids the post-processor adds to an empty input (e.g. BOS), prepended when
    /// `add_special_tokens` is requested.
    lead: Vec<u32>,
    cache: Mutex<LruCache<u64, CachedPrefix>>,
}

impl std::fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTokenizer")
            .field("model", &self.model)
            .field("chat_template", &self.template.is_some())
            .field(
                "cached_prefixes",
                &self
                    .cache
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .finish_non_exhaustive()
    }
}

fn token_text(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Object(o)) => o
            .get("content")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    }
}

fn raise_exception(msg: String) -> std::result::Result<String, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        msg,
    ))
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
        let err = |reason: String| Error::Tokenizer {
            model: model.to_owned(),
            reason,
        };
        let tok = tokenizers::Tokenizer::from_file(tokenizer_json)
            .map_err(|e| err(format!("{}: {e}", tokenizer_json.display())))?;
        let template = match tokenizer_config {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|e| err(format!("{}: {e}", p.display())))?;
                let cfg: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| err(format!("{}: {e}", p.display())))?;
                let source = match cfg.get("chat_template") {
                    Some(serde_json::Value::String(s)) => Some(s.clone()),
                    // A list of named templates: use "default".
                    Some(serde_json::Value::Array(list)) => list
                        .iter()
                        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                        .and_then(|t| t.get("template"))
                        .and_then(|t| t.as_str())
                        .map(str::to_owned),
                    _ => None,
                };
                match source {
                    Some(src) => {
                        let mut env = minijinja::Environment::new();
                        let syntax = minijinja::syntax::SyntaxConfig::builder()
                            .trim_blocks(true)
                            .lstrip_blocks(true)
                            .build()
                            .map_err(|e| err(format!("chat template syntax: {e}")))?;
                        env.set_syntax(syntax);
                        env.set_unknown_method_callback(
                            minijinja_contrib::pycompat::unknown_method_callback,
                        );
                        env.add_function("raise_exception", raise_exception);
                        env.add_template_owned("chat", src)
                            .map_err(|e| err(format!("chat template: {e}")))?;
                        Some(ChatTemplate {
                            env,
                            bos: token_text(cfg.get("bos_token")),
                            eos: token_text(cfg.get("eos_token")),
                        })
                    }
                    None => None,
                }
            }
            None => None,
        };
        let mut specials: Vec<String> = tok
            .get_added_tokens_decoder()
            .into_values()
            .filter(|t| {
                t.special && !t.lstrip && !t.rstrip && !t.single_word && !t.content.is_empty()
            })
            .map(|t| regex::escape(&t.content))
            .collect();
        specials.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        let cuts = if specials.is_empty() {
            None
        } else {
            Some(
                regex::Regex::new(&specials.join("|"))
                    .map_err(|e| err(format!("special tokens: {e}")))?,
            )
        };
        let lead = tok
            .encode_fast("", true)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default();
        let cache = LruCache::new(NonZeroUsize::new(cache_entries).unwrap_or(NonZeroUsize::MIN));
        Ok(Self {
            model: model.to_owned(),
            tok,
            template,
            cuts: if cache_entries == 0 { None } else { cuts },
            lead,
            cache: Mutex::new(cache),
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
        self.template.is_some()
    }

    /// Renders chat messages into the prompt text the engine sees, with the generation
    /// prompt appended (`add_generation_prompt=True`).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the template fails (for example `raise_exception`).
    pub fn render_chat(&self, messages: &[Message]) -> Result<String> {
        let Some(t) = &self.template else {
            let mut s = Prompt::Messages(messages.to_vec()).render();
            s.push_str("<|im_start|>assistant\n");
            return Ok(s);
        };
        let msgs: Vec<HashMap<&str, String>> = messages
            .iter()
            .map(|m| HashMap::from([("role", m.role.clone()), ("content", m.content.clone())]))
            .collect();
        let tmpl = t.env.get_template("chat").map_err(|e| Error::Tokenizer {
            model: self.model.clone(),
            reason: e.to_string(),
        })?;
        tmpl.render(minijinja::context! {
            messages => msgs,
            add_generation_prompt => true,
            bos_token => t.bos.clone(),
            eos_token => t.eos.clone(),
        })
        .map_err(|e| Error::Tokenizer {
            model: self.model.clone(),
            reason: format!("chat template: {e}"),
        })
    }

    fn encode_piece(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.tok
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer {
                model: self.model.clone(),
                reason: e.to_string(),
            })
    }

    /// Token ids of `text` without the prefix cache (the reference result).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the tokenizer fails.
    pub fn encode_uncached(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.encode_piece(text, add_special_tokens)
    }

    /// Token ids of `text`, reusing the longest cached prefix (see the module docs); the
    /// result equals [`encode_uncached`](Self::encode_uncached).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the tokenizer fails.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<(Vec<u32>, CacheOutcome)> {
        let Some(re) = &self.cuts else {
            return Ok((
                self.encode_piece(text, add_special_tokens)?,
                CacheOutcome::Uncacheable,
            ));
        };
        // Cut points: 0, every special-token start, len.
        let mut cuts: Vec<usize> = Vec::with_capacity(16);
        cuts.push(0);
        cuts.extend(re.find_iter(text).map(|m| m.start()).filter(|&s| s > 0));
        cuts.push(text.len());
        cuts.dedup();
        if cuts.len() <= 2 && text.len() < MIN_CACHED_PREFIX_BYTES {
            return Ok((
                self.encode_piece(text, add_special_tokens)?,
                CacheOutcome::Uncacheable,
            ));
        }
        // hashes[k]: the prefix text[..cuts[k]], chained piece by piece.
        let seed = u64::from(add_special_tokens);
        let mut hashes = Vec::with_capacity(cuts.len());
        hashes.push(seed);
        for w in cuts.windows(2) {
            let prev = hashes.last().copied().unwrap_or(seed);
            hashes.push(xxh3_64_with_seed(&text.as_bytes()[w[0]..w[1]], prev));
        }
        let mut start = 0;
        let mut ids: Vec<u32> = Vec::new();
        {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            for k in (1..cuts.len()).rev() {
                if cuts[k] < MIN_CACHED_PREFIX_BYTES {
                    break;
                }
                if let Some((len, cached)) = cache.get(&hashes[k])
                    && *len == cuts[k]
                {
                    ids.reserve(cached.len() + (text.len() - cuts[k]) / 3);
                    ids.extend_from_slice(cached);
                    start = k;
                    break;
                }
            }
        }
        let outcome = if start > 0 {
            CacheOutcome::Hit {
                prefix_bytes: cuts[start],
            }
        } else {
            CacheOutcome::Miss
        };
        if start == 0 && add_special_tokens {
            ids.extend_from_slice(&self.lead);
        }
        let mut fresh: Vec<(u64, usize, Arc<[u32]>)> = Vec::new();
        for k in start..cuts.len() - 1 {
            let piece = &text[cuts[k]..cuts[k + 1]];
            ids.extend(self.encode_piece(piece, false)?);
            if cuts[k + 1] >= MIN_CACHED_PREFIX_BYTES {
                fresh.push((hashes[k + 1], cuts[k + 1], Arc::from(&ids[..])));
            }
        }
        if !fresh.is_empty() {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            for (h, len, v) in fresh {
                cache.put(h, (len, v));
            }
        }
        Ok((ids, outcome))
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

    /// Token ids of a request's prompt: in-process when a tokenizer is configured for one of
    /// `models` (tried in order), else (when `remote_url` is given and the remote fallback is
    /// on) from that engine's `/tokenize`. `None` when neither works. Observes
    /// `kthena_router_tokenize_duration_seconds` and the prefix-cache counter.
    pub async fn tokens(
        &self,
        client: &HttpClient,
        metrics: &KvMetrics,
        models: &[&str],
        prompt: &Prompt,
        remote_url: Option<&str>,
    ) -> Option<Vec<u32>> {
        let started = Instant::now();
        if let Some(t) = self.get(models) {
            let big = match prompt {
                Prompt::Text(s) => s.len(),
                Prompt::Messages(m) => m.iter().map(|m| m.content.len()).sum(),
            } > BLOCKING_THRESHOLD_BYTES;
            let res = if big {
                let (t, p) = (Arc::clone(t), prompt.clone());
                tokio::task::spawn_blocking(move || t.tokenize_prompt(&p))
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

/// The `/tokenize` request body for a prompt (Go Kthena's vLLM shape, spec §3.8; the
/// `content` key makes llama.cpp's `/tokenize` answer completion prompts too).
#[must_use]
pub fn remote_body(model: &str, prompt: &Prompt) -> serde_json::Value {
    match prompt {
        Prompt::Text(t) => serde_json::json!({
            "model": model, "prompt": t, "content": t, "add_special_tokens": true, "return_token_strs": false
        }),
        Prompt::Messages(m) => {
            let msgs: Vec<serde_json::Value> = m
                .iter()
                .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
                .collect();
            serde_json::json!({
                "model": model, "messages": msgs, "add_special_tokens": false,
                "add_generation_prompt": true, "return_token_strs": false
            })
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
        .body(Full::new(Bytes::from(body)))
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
