//! The tokenizer and its prompt-prefix cache (see the crate docs).

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::fast::FastPath;
use crate::template::{ChatMessage, ChatTemplate, render_chatml};
use crate::{Error, Result};

/// Prefixes shorter than this many bytes are not cached (tokenizing them is cheap).
pub const MIN_CACHED_PREFIX_BYTES: usize = 256;

/// Whether [`Tokenizer::encode`] reused a cached prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A cached prefix of this many bytes was reused.
    Hit {
        /// Length of the reused prefix, bytes of the text.
        prefix_bytes: usize,
    },
    /// Nothing was reused.
    Miss,
    /// The text has no cut point (or the cache is off); the cache was not consulted.
    Uncacheable,
}

/// Links of a cached prefix's chain before a link holds its whole prefix again.
const MAX_CHAIN: usize = 64;

/// A cached prefix's token ids as the ids added since a shorter cached prefix it extends, so
/// that caching the prefixes of a growing text (each turn of a conversation) copies only the
/// new ids. A chain is cut after [`MAX_CHAIN`] links by a link that holds the whole prefix,
/// which bounds the walk of a lookup and keeps the memory of an entry at most its prefix.
struct CachedPrefix {
    /// Length of the prefix, bytes of the text (checked on lookup).
    bytes: usize,
    /// Ids of the whole prefix: `parent`'s, then `piece`.
    len: usize,
    /// Links before this one.
    depth: usize,
    /// The ids after `parent`'s (all of them without a parent).
    piece: Box<[u32]>,
    parent: Option<Arc<Self>>,
}

impl CachedPrefix {
    /// The prefix whose ids are `ids`, of which `ids[..parent.len]` are `parent`'s.
    fn new(bytes: usize, ids: &[u32], parent: Option<Arc<Self>>) -> Self {
        match parent.filter(|p| p.depth + 1 < MAX_CHAIN) {
            Some(p) => Self {
                bytes,
                len: ids.len(),
                depth: p.depth + 1,
                piece: ids[p.len..].into(),
                parent: Some(p),
            },
            None => Self {
                bytes,
                len: ids.len(),
                depth: 0,
                piece: ids.into(),
                parent: None,
            },
        }
    }

    /// Appends the prefix's ids to `out`.
    fn extend_into(&self, out: &mut Vec<u32>) {
        let mut chain: Vec<&[u32]> = Vec::with_capacity(self.depth + 1);
        let mut link = Some(self);
        while let Some(l) = link {
            chain.push(&l.piece);
            link = l.parent.as_deref();
        }
        out.reserve(self.len);
        for piece in chain.iter().rev() {
            out.extend_from_slice(piece);
        }
    }
}

/// A model's tokenizer, chat template and prompt-prefix cache. `Sync`: share it between
/// threads behind an `Arc`; the cache is behind a mutex held only for lookups and inserts.
pub struct Tokenizer {
    path: PathBuf,
    tok: tokenizers::Tokenizer,
    template: Option<ChatTemplate>,
    /// Matches the special tokens the text may be cut before; `None` turns the cache off.
    cuts: Option<regex::Regex>,
    /// Ids the post-processor adds to an empty input (e.g. BOS), prepended when
    /// `add_special_tokens` is requested.
    lead: Vec<u32>,
    /// The exact fast path of Qwen2/Qwen3-shaped tokenizers (`crate::fast`), when it applies.
    fast: Option<FastPath>,
    cache: Mutex<LruCache<u64, Arc<CachedPrefix>>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("path", &self.path)
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

/// The special tokens a text may be cut before, longest first.
fn cut_regex(tok: &tokenizers::Tokenizer) -> Option<regex::Regex> {
    let mut specials: Vec<String> = tok
        .get_added_tokens_decoder()
        .into_values()
        .filter(|t| t.special && !t.lstrip && !t.rstrip && !t.single_word && !t.content.is_empty())
        .map(|t| regex::escape(&t.content))
        .collect();
    specials.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    // Escaped literals joined by `|` always compile.
    (!specials.is_empty())
        .then(|| regex::Regex::new(&specials.join("|")).ok())
        .flatten()
}

impl Tokenizer {
    /// Loads `tokenizer_json` and, when given, the chat template and BOS/EOS strings of
    /// `tokenizer_config` (a config without `chat_template` leaves ChatML in use). The prefix
    /// cache holds at most `cache_entries` prefixes (0 turns it off).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when `tokenizer_json` cannot be loaded; [`Error::Read`],
    /// [`Error::Config`] or [`Error::Template`] when the config cannot be read or parsed or
    /// its template does not compile.
    pub fn load(
        tokenizer_json: &Path,
        tokenizer_config: Option<&Path>,
        cache_entries: usize,
    ) -> Result<Self> {
        // The template first: it is cheap, the tokenizer takes a while to load.
        let template = match tokenizer_config {
            Some(p) => ChatTemplate::load(p)?,
            None => None,
        };
        let tok =
            tokenizers::Tokenizer::from_file(tokenizer_json).map_err(|e| Error::Tokenizer {
                path: tokenizer_json.to_owned(),
                message: e.to_string(),
            })?;
        let lead = tok
            .encode_fast("", true)
            .map(|e| e.get_ids().to_vec())
            .unwrap_or_default();
        Ok(Self {
            path: tokenizer_json.to_owned(),
            cuts: if cache_entries == 0 {
                None
            } else {
                cut_regex(&tok)
            },
            fast: FastPath::detect(&tok),
            tok,
            template,
            lead,
            cache: Mutex::new(LruCache::new(
                NonZeroUsize::new(cache_entries).unwrap_or(NonZeroUsize::MIN),
            )),
        })
    }

    /// Loads `tokenizer_json` and the `tokenizer_config.json` next to it when there is one
    /// (Hugging Face's model layout); see [`load`](Self::load).
    ///
    /// # Errors
    /// As [`load`](Self::load).
    pub fn from_file(tokenizer_json: &Path, cache_entries: usize) -> Result<Self> {
        let config = tokenizer_json.with_file_name("tokenizer_config.json");
        let config = config.exists().then_some(config);
        Self::load(tokenizer_json, config.as_deref(), cache_entries)
    }

    /// The underlying Hugging Face tokenizer.
    #[must_use]
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.tok
    }

    /// Whether a chat template was loaded.
    #[must_use]
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Vocabulary size, added tokens included.
    #[must_use]
    pub fn vocab_size(&self) -> usize {
        self.tok.get_vocab_size(true)
    }

    /// Renders chat messages into the prompt text the engine sees, with the generation
    /// prompt appended: the model's chat template when one was loaded, else ChatML
    /// ([`render_chatml`]).
    ///
    /// # Errors
    /// [`Error::Template`] when the template fails (for example `raise_exception`).
    pub fn render_chat<M: ChatMessage>(&self, messages: &[M]) -> Result<String> {
        match &self.template {
            Some(t) => t.render(messages),
            None => Ok(render_chatml(messages)),
        }
    }

    /// Whether texts are encoded through the exact fast path of Qwen2/Qwen3-shaped
    /// tokenizers (see the crate docs) rather than by `tokenizers` alone.
    #[must_use]
    pub fn has_fast_path(&self) -> bool {
        self.fast.is_some()
    }

    fn encode_piece(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        self.encode_piece_into(text, add_special_tokens, &mut ids)?;
        Ok(ids)
    }

    /// Appends the ids of `text` to `out`: through the fast path when it applies.
    fn encode_piece_into(
        &self,
        text: &str,
        add_special_tokens: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        if let Some(fast) = self.fast.as_ref().filter(|_| !add_special_tokens) {
            out.reserve(text.len() / 3);
            return fast
                .encode(&self.tok, text, out)
                .map_err(|message| Error::Tokenizer {
                    path: self.path.clone(),
                    message,
                });
        }
        out.extend(self.reference(text, add_special_tokens)?);
        Ok(())
    }

    /// `tokenizers`' own encode.
    fn reference(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.tok
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }

    /// Token ids of `text` without the prefix cache (the reference result).
    /// `add_special_tokens` adds the tokenizer's decorations (BOS, ...): vLLM adds them to
    /// completion prompts, not to rendered chat.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the tokenizer fails.
    pub fn encode_uncached(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.reference(text, add_special_tokens)
    }

    /// Text of `ids`, special tokens kept (vLLM's `/detokenize`).
    ///
    /// # Errors
    /// [`Error::UnknownId`] for the first id outside the vocabulary, [`Error::Tokenizer`]
    /// when the decoder fails.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|id| **id as usize >= vocab_size) {
            return Err(Error::UnknownId { id, vocab_size });
        }
        self.tok.decode(ids, false).map_err(|e| Error::Tokenizer {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Token ids of `text`, reusing the longest cached prefix (see the crate docs); the ids
    /// equal [`encode_uncached`](Self::encode_uncached)'s.
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
        let (mut ids, start, mut parent) = self.longest_cached(text, &cuts, &hashes);
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
        let mut fresh: Vec<(u64, Arc<CachedPrefix>)> = Vec::new();
        for k in start..cuts.len() - 1 {
            let piece = &text[cuts[k]..cuts[k + 1]];
            self.encode_piece_into(piece, false, &mut ids)?;
            if cuts[k + 1] >= MIN_CACHED_PREFIX_BYTES {
                let link = Arc::new(CachedPrefix::new(cuts[k + 1], &ids, parent.take()));
                fresh.push((hashes[k + 1], Arc::clone(&link)));
                parent = Some(link);
            }
        }
        if !fresh.is_empty() {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            for (h, link) in fresh {
                cache.put(h, link);
            }
        }
        Ok((ids, outcome))
    }

    /// The ids of the longest cached prefix ending at a cut, that cut's index (0: none) and
    /// the cached prefix.
    fn longest_cached(
        &self,
        text: &str,
        cuts: &[usize],
        hashes: &[u64],
    ) -> (Vec<u32>, usize, Option<Arc<CachedPrefix>>) {
        let found = {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            (1..cuts.len())
                .rev()
                .take_while(|&k| cuts[k] >= MIN_CACHED_PREFIX_BYTES)
                .find_map(|k| {
                    let link = cache.get(&hashes[k]).filter(|l| l.bytes == cuts[k])?;
                    Some((k, Arc::clone(link)))
                })
        };
        match found {
            Some((k, link)) => {
                let mut ids = Vec::with_capacity(link.len + (text.len() - cuts[k]) / 3);
                link.extend_into(&mut ids);
                (ids, k, Some(link))
            }
            None => (Vec::new(), 0, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_of_cached_prefixes_gives_back_every_prefix_and_stays_short() {
        let ids: Vec<u32> = (0..3_000).collect();
        let mut parent: Option<Arc<CachedPrefix>> = None;
        let mut links = Vec::new();
        for end in (10..=3_000).step_by(10) {
            let link = Arc::new(CachedPrefix::new(end * 4, &ids[..end], parent.take()));
            links.push((end, Arc::clone(&link)));
            parent = Some(link);
        }
        for (end, link) in &links {
            let mut out = vec![7, 7];
            link.extend_into(&mut out);
            assert_eq!(out[2..], ids[..*end], "prefix of {end} ids");
            assert_eq!((link.bytes, link.len), (end * 4, *end));
            assert!(link.depth < MAX_CHAIN);
        }
        // The 65th link starts a new chain: it holds its whole prefix.
        assert_eq!(links[63].1.depth, MAX_CHAIN - 1);
        assert_eq!(links[64].1.depth, 0);
        assert_eq!(links[64].1.piece.len(), 650);
        assert_eq!(links[65].1.piece.len(), 10);
    }
}
