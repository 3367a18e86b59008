//! Prompt tokenization as the engine computes it, with a prompt-prefix cache.
//!
//! A model's Hugging Face `tokenizer.json` is loaded in-process with the `tokenizers` crate.
//! Chat requests are rendered with the model's chat template (`chat_template` of
//! `tokenizer_config.json`, a string or the entry named `default` of a list, evaluated with
//! `minijinja` plus its Python-compatible string methods, `trim_blocks` and `lstrip_blocks` on,
//! `add_generation_prompt=True`, as Hugging Face renders it), so the token ids are those the
//! engine computes and hashes into KV blocks. Without a template, messages are rendered in
//! ChatML ([`render_chatml`]). Engines (vLLM's `/tokenize`) encode rendered chat prompts
//! without added special tokens and completion prompts with them.
//!
//! # Fast path
//!
//! For tokenizers shaped like Qwen2's and Qwen3's (byte-level BPE, NFC, the word-split
//! pattern [`QWEN2_SPLIT_PATTERN`]), the plain-ASCII spans of a text are split into words by
//! a byte scanner instead of `tokenizers`' general pipeline, and each word goes to the
//! tokenizer's own BPE model; spans with other characters, and every other tokenizer, go
//! through `tokenizers` (details in the `fast` module). The ids are `tokenizers`' own on every
//! text ([`Tokenizer::encode_uncached`] stays `tokenizers` alone, the reference the tests
//! compare with); [`Tokenizer::has_fast_path`] says whether it applies.
//!
//! # Prompt-prefix cache
//!
//! Tokenizers split the text at special tokens (`<|im_start|>`, ...) before anything else, so
//! the ids of a text are the concatenation of the ids of its pieces when it is cut just before
//! a special token. [`Tokenizer::encode`] cuts there, keys each prefix ending at a cut by a
//! chained XXH3-64 hash of its pieces, and keeps the ids of such prefixes (at least
//! [`MIN_CACHED_PREFIX_BYTES`] long) in an LRU of `cache_entries` entries. A request that
//! repeats a long system prompt then only tokenizes what follows the longest cached prefix.
//! An entry holds only the ids added since the shorter cached prefix it extends (a chain of
//! shared pieces, cut every 64 links by an entry that holds its whole prefix), so caching
//! the prefixes of a growing conversation costs the new ids, not a copy of the history.
//! Texts without special tokens (plain completion prompts) are not cached. The result always
//! equals [`Tokenizer::encode_uncached`].
//!
//! ```
//! use kthena_tokenize::{CacheOutcome, Tokenizer};
//! # let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3");
//! # let dir = if dir.exists() { dir } else { "/work/shared/tokenizers/qwen3".into() };
//! // `dir` holds Qwen3's tokenizer.json and tokenizer_config.json.
//! let tok = Tokenizer::from_file(&dir.join("tokenizer.json"), 256)?;
//! assert_eq!(tok.encode_uncached("Hello, world!", true)?, [9707, 11, 1879, 0]);
//!
//! let system = "You are a helpful assistant. ".repeat(20);
//! let chat = |q: &str| tok.render_chat(&[("system", system.as_str()), ("user", q)]);
//! let (first, outcome) = tok.encode(&chat("Hi!")?, false)?;
//! assert_eq!(outcome, CacheOutcome::Miss);
//! let (second, outcome) = tok.encode(&chat("Bye!")?, false)?;
//! assert!(matches!(outcome, CacheOutcome::Hit { .. }));
//! assert_eq!(first[..100], second[..100]);
//! # Ok::<(), kthena_tokenize::Error>(())
//! ```

use std::path::PathBuf;

mod fast;
mod template;
mod tokenizer;

pub use fast::QWEN2_SPLIT_PATTERN;
pub use template::{ChatMessage, render_chatml};
pub use tokenizer::{CacheOutcome, MIN_CACHED_PREFIX_BYTES, Tokenizer};

/// Why a tokenizer could not be loaded or applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer_config.json` is not valid JSON.
    #[error("{} is not valid JSON", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The `tokenizers` crate refused a `tokenizer.json` or failed to encode or decode.
    #[error("tokenizer {}: {message}", path.display())]
    Tokenizer {
        /// The `tokenizer.json` file.
        path: PathBuf,
        /// The `tokenizers` crate's message (its errors are boxed trait objects).
        message: String,
    },
    /// The chat template does not compile, or failed to render (for example through the
    /// template's own `raise_exception`).
    #[error("chat template: {0}")]
    Template(#[from] minijinja::Error),
    /// A token id outside the vocabulary was given to [`Tokenizer::decode`].
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownId {
        /// The first such id.
        id: u32,
        /// Vocabulary size, added tokens included.
        vocab_size: usize,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
