//! Tokenization: a Hugging Face `tokenizer.json` when configured (the `kthena-tokenize`
//! crate, shared with the router: chat template, prompt-prefix cache), else a deterministic
//! fallback.
//!
//! # Fallback tokenizer
//!
//! Text is cut into *words* (a run of whitespace followed by a run of non-whitespace, like the
//! `" word"` pieces of byte-level BPE), and each word into pieces of at most 4 characters (the
//! usual "about 4 characters per token" rule of thumb for English). A piece's id is
//! `FNV-1a-64(piece UTF-8 bytes) mod 100_000`. Ids are therefore stable across processes and
//! machines; any other program can reproduce them from this paragraph. Decoding is only
//! defined for the ids the simulator generates (see [`Tokenizer::output_vocab`]).

use std::path::Path;
use std::sync::Arc;

use crate::{Error, Result};

/// Vocabulary size of the fallback tokenizer.
pub const FALLBACK_VOCAB: u64 = 100_000;

/// Words the simulator draws generated text from (each with a leading space).
const OUTPUT_WORDS: &[&str] = &[
    " the", " model", " serves", " tokens", " quickly", " and", " every", " request", " gets",
    " a", " fair", " share", " of", " the", " cache", " while", " batches", " grow", " with",
    " load", " so", " routing", " matters", " more", " than", " ever", " before", " in", " this",
    " cluster", " today", " it", " is", " fast", " light", " data", " flows", " through", " each",
    " node", " we", " keep", " prefix", " blocks", " warm", " for", " next", " turn", " time",
];

/// FNV-1a 64-bit hash (the fallback tokenizer's id function).
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Id of one fallback piece.
fn fallback_id(piece: &str) -> u32 {
    // The modulus is below u32::MAX, so the conversion cannot fail.
    u32::try_from(fnv1a64(piece.as_bytes()) % FALLBACK_VOCAB).unwrap_or(0)
}

/// Pieces of `text` under the fallback rules.
fn fallback_pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut word_start = 0;
    let mut in_word = false;
    let mut bounds = Vec::new();
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if in_word {
                bounds.push((word_start, i));
                word_start = i;
                in_word = false;
            }
        } else {
            in_word = true;
        }
    }
    if word_start < text.len() {
        bounds.push((word_start, text.len()));
    }
    for (s, e) in bounds {
        let word = &text[s..e];
        let mut start = 0;
        let mut count = 0;
        for (i, _) in word.char_indices() {
            if count == 4 {
                pieces.push(&word[start..i]);
                start = i;
                count = 0;
            }
            count += 1;
        }
        pieces.push(&word[start..]);
    }
    pieces
}

/// Prompt prefixes the Hugging Face tokenizer keeps (`kthena_tokenize`'s prefix cache).
const PREFIX_CACHE_ENTRIES: usize = 256;

#[derive(Debug)]
enum Inner {
    Hf(Box<kthena_tokenize::Tokenizer>),
    Fallback,
}

/// A tokenizer shared by all requests. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
    /// `(id, text)` pairs generated output is drawn from.
    vocab: Arc<Vec<(u32, String)>>,
}

impl Tokenizer {
    /// The deterministic fallback tokenizer described in the module docs.
    #[must_use]
    pub fn fallback() -> Self {
        let mut vocab: Vec<(u32, String)> = OUTPUT_WORDS
            .iter()
            .map(|w| (fallback_id(w), (*w).to_owned()))
            .collect();
        vocab.dedup_by(|a, b| a.0 == b.0);
        Self {
            inner: Arc::new(Inner::Fallback),
            vocab: Arc::new(vocab),
        }
    }

    /// Loads a Hugging Face `tokenizer.json`, and the chat template of the
    /// `tokenizer_config.json` next to it when there is one (Hugging Face's model layout).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] if a file cannot be read or parsed, or the template does not
    /// compile.
    pub fn from_file(path: &Path) -> Result<Self> {
        let err = |reason: String| Error::Tokenizer {
            path: path.display().to_string(),
            reason,
        };
        let tok = kthena_tokenize::Tokenizer::from_file(path, PREFIX_CACHE_ENTRIES)
            .map_err(|e| err(e.to_string()))?;
        let mut vocab = Vec::new();
        for w in OUTPUT_WORDS {
            let ids = tok
                .encode_uncached(w, false)
                .map_err(|e| err(e.to_string()))?;
            for id in ids {
                let text = tok.decode(&[id]).map_err(|e| err(e.to_string()))?;
                if !text.is_empty() && !vocab.iter().any(|(v, _)| *v == id) {
                    vocab.push((id, text));
                }
            }
        }
        if vocab.is_empty() {
            return Err(err("the tokenizer produced no output vocabulary".to_owned()));
        }
        Ok(Self {
            inner: Arc::new(Inner::Hf(Box::new(tok))),
            vocab: Arc::new(vocab),
        })
    }

    /// Token ids of `text`. `add_special_tokens` adds the tokenizer's BOS/EOS decorations
    /// (vLLM: true for completion prompts, false for rendered chat); the fallback tokenizer
    /// has none.
    #[must_use]
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        match &*self.inner {
            Inner::Hf(tok) => tok
                .encode(text, add_special_tokens)
                .map(|(ids, _)| ids)
                .unwrap_or_default(),
            Inner::Fallback => fallback_pieces(text).into_iter().map(fallback_id).collect(),
        }
    }

    /// Text of `ids` (vLLM `/detokenize`: special tokens kept). The fallback tokenizer hashes
    /// prompt pieces, so it can only invert its output vocabulary; any other id below
    /// [`FALLBACK_VOCAB`] decodes to `[id]`.
    ///
    /// # Errors
    /// The first id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> std::result::Result<String, u32> {
        match &*self.inner {
            Inner::Hf(tok) => match tok.decode(ids) {
                Err(kthena_tokenize::Error::UnknownId { id, .. }) => Err(id),
                other => Ok(other.unwrap_or_default()),
            },
            Inner::Fallback => ids
                .iter()
                .map(|id| {
                    if u64::from(*id) >= FALLBACK_VOCAB {
                        return Err(*id);
                    }
                    Ok(self
                        .vocab
                        .iter()
                        .find(|(v, _)| v == id)
                        .map_or_else(|| format!("[{id}]"), |(_, t)| t.clone()))
                })
                .collect(),
        }
    }

    /// The `(id, text)` pairs generated tokens are drawn from; never empty.
    #[must_use]
    pub fn output_vocab(&self) -> &[(u32, String)] {
        &self.vocab
    }

    /// Whether this is a real Hugging Face tokenizer.
    #[must_use]
    pub fn is_hf(&self) -> bool {
        matches!(&*self.inner, Inner::Hf(_))
    }

    /// Whether a model chat template was loaded.
    #[must_use]
    pub fn has_chat_template(&self) -> bool {
        matches!(&*self.inner, Inner::Hf(t) if t.has_chat_template())
    }

    /// Renders `(role, content)` messages into the prompt text, with the generation prompt
    /// appended: the model's chat template when one was loaded (evaluated with `minijinja`
    /// and its Python-compatible methods, `add_generation_prompt=True`), else
    /// [`render_chat`].
    ///
    /// # Errors
    /// The template's error message (for example from `raise_exception`).
    pub fn render_chat(
        &self,
        messages: &[(String, String)],
    ) -> std::result::Result<String, String> {
        match &*self.inner {
            Inner::Hf(t) => t.render_chat(messages).map_err(|e| e.to_string()),
            Inner::Fallback => Ok(render_chat(messages)),
        }
    }
}

/// Renders chat messages into one prompt with the ChatML layout used by Qwen models
/// (`<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
/// `<|im_start|>assistant\n`); used when no model chat template is loaded.
#[must_use]
pub fn render_chat(messages: &[(String, String)]) -> String {
    kthena_tokenize::render_chatml(messages)
}

#[cfg(test)]
mod tests;
