//! The request as the scheduler sees it ([`Request`], borrowed) and what is kept of it until
//! it ends ([`Completion`], owned).

use std::sync::Arc;

use crate::prefetch::Prefetch;
use crate::types::EndpointId;

/// `ceil(bytes / 4)`: Go Kthena's token estimate for a prompt it did not tokenize.
pub(crate) fn estimated_tokens(prompt_bytes: usize) -> usize {
    prompt_bytes.div_ceil(4)
}

/// The scheduler's view of one inference request. Borrowed, `Copy`, built per request; nothing
/// of it is kept after [`Scheduler::on_scheduled`](crate::Scheduler::on_scheduled) returns.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    /// The model name the client asked for (before any rewrite to the ModelServer's model);
    /// it seeds the prefix-cache hash chain.
    pub model: &'a str,
    /// The LoRA adapter the request targets, if the route matched one.
    pub lora: Option<&'a str>,
    /// The prompt as bytes: the completion prompt, or the rendered chat prompt. Hashed in
    /// blocks by `prefix-cache`.
    pub prompt: &'a [u8],
    /// The prompt's token ids, when the host tokenized it. Hashed in blocks by
    /// `kvcache-aware`; without them that plugin scores every candidate 0.
    pub token_ids: Option<&'a [u32]>,
    /// A session or user key, if any (not read by built-in plugins).
    pub session: Option<&'a str>,
    /// The host's answers to the KV-index lookups of [`Scheduler::prepare`](crate::Scheduler::prepare),
    /// if it fetched them: plugins read these instead of the KV index, so scheduling never
    /// waits on a remote index. `None`: plugins ask the index directly.
    pub prefetch: Option<&'a Prefetch>,
}

// === impl Request ===

impl<'a> Request<'a> {
    /// A request for `model` with an empty prompt.
    pub fn new(model: &'a str) -> Self {
        Self {
            model,
            ..Self::default()
        }
    }

    /// Sets the prompt text.
    #[must_use]
    pub fn with_prompt(mut self, prompt: &'a str) -> Self {
        self.prompt = prompt.as_bytes();
        self
    }

    /// Sets the prompt bytes.
    #[must_use]
    pub fn with_prompt_bytes(mut self, prompt: &'a [u8]) -> Self {
        self.prompt = prompt;
        self
    }

    /// Sets the prompt's token ids.
    #[must_use]
    pub fn with_token_ids(mut self, token_ids: &'a [u32]) -> Self {
        self.token_ids = Some(token_ids);
        self
    }

    /// Sets the LoRA adapter.
    #[must_use]
    pub fn with_lora(mut self, lora: &'a str) -> Self {
        self.lora = Some(lora);
        self
    }

    /// Sets the session or user key.
    #[must_use]
    pub fn with_session(mut self, session: &'a str) -> Self {
        self.session = Some(session);
        self
    }

    /// Sets the answered KV-index lookups ([`Prefetch`]).
    #[must_use]
    pub fn with_prefetch(mut self, prefetch: &'a Prefetch) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    /// The name an endpoint must serve: the LoRA adapter if set, else the model.
    pub fn target_name(&self) -> &'a str {
        self.lora.unwrap_or(self.model)
    }
}

/// What the scheduler needs when a scheduled request ends, owned: no borrow of the request,
/// so a host can drop the request body once it is sent and keep only this until the
/// response stream ends.
///
/// [`Scheduler::on_scheduled`](crate::Scheduler::on_scheduled) returns it; hand it back to
/// [`Scheduler::on_completed`](crate::Scheduler::on_completed) with the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// The endpoint the request was sent to.
    pub endpoint: EndpointId,
    /// The request's model name.
    pub model: Arc<str>,
    /// The LoRA adapter, if any.
    pub lora: Option<Arc<str>>,
    /// The session or user key, if any.
    pub session: Option<Arc<str>>,
    /// Prompt length in tokens: the token ids' count, else `ceil(prompt bytes / 4)` (Go
    /// Kthena's estimate).
    pub prompt_tokens: u64,
    /// Prompt tokens the endpoint still had to prefill when the request was sent, in tokens
    /// ([`Scheduler::prefill_tokens`](crate::Scheduler::prefill_tokens), computed before the
    /// plugins recorded this request): what to pass to
    /// [`LoadTracker::begin`](crate::LoadTracker::begin).
    pub prefill_tokens: u64,
    /// `(plugin, block hashes)` for every score plugin that keys its state by the request's
    /// blocks ([`ScorePlugin::completion_blocks`](crate::ScorePlugin::completion_blocks)).
    blocks: Vec<(&'static str, Arc<[u64]>)>,
}

// === impl Completion ===

impl Completion {
    /// The completion data of `req` sent to `endpoint`, with no plugin blocks and
    /// `prefill_tokens == prompt_tokens` (what a scheduler without a KV index returns).
    pub fn new(req: &Request<'_>, endpoint: EndpointId) -> Self {
        let prompt_tokens = match req.token_ids.filter(|t| !t.is_empty()) {
            Some(t) => t.len() as u64,
            None => estimated_tokens(req.prompt.len()) as u64,
        };
        Self {
            endpoint,
            model: req.model.into(),
            lora: req.lora.map(Into::into),
            session: req.session.map(Into::into),
            prompt_tokens,
            prefill_tokens: prompt_tokens,
            blocks: Vec::new(),
        }
    }

    /// The block hashes `plugin` recorded for this request, if it did.
    pub fn blocks(&self, plugin: &str) -> Option<&[u64]> {
        self.blocks
            .iter()
            .find(|(p, _)| *p == plugin)
            .map(|(_, b)| &**b)
    }

    pub(crate) fn push_blocks(&mut self, plugin: &'static str, blocks: Arc<[u64]>) {
        self.blocks.push((plugin, blocks));
    }
}
