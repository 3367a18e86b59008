//! An exact fast path of the `tokenizers` crate's encode for byte-level BPE tokenizers that
//! split words with the Qwen2/Qwen3 pattern ([`QWEN2_SPLIT_PATTERN`]).
//!
//! `tokenizers` runs every text through its general pipeline: added tokens split out, the
//! normalizer (NFC) over a string that tracks the alignment of every byte, the split
//! pre-tokenizer (a backtracking Oniguruma regex), the byte-level mapping, then the BPE model
//! per word. For the spans of a text that are plain ASCII the first three steps reduce to
//! identities and a byte scan: NFC does not change ASCII, and the split pattern's classes
//! (`\p{L}`, `\p{N}`, `\s`) are ASCII letters, digits and `[\t\n\x0B\x0C\r ]`. This module
//! does those spans with a hand-written scanner that follows the pattern's alternatives in
//! order ([`split_ascii`]), maps the bytes of each word as the byte-level pre-tokenizer does,
//! and hands the word to the tokenizer's own BPE model (its merges, its vocabulary, its
//! per-thread word cache). Repeated words within one text reuse the ids of their first
//! occurrence. Spans with any non-ASCII byte go through `tokenizers` unchanged, so the ids
//! are those of `tokenizers` on every text (checked against it on corpora and random text in
//! `tests/exact.rs`).
//!
//! It is used only when the loaded `tokenizer.json` has exactly this shape: NFC or no
//! normalizer, the pre-tokenizer sequence `Split(QWEN2_SPLIT_PATTERN, Isolated)` then
//! `ByteLevel` without its own regex, a BPE model without dropout, every added token matched
//! on the raw text (`normalized`, `lstrip`, `rstrip`, `single_word` all false), no truncation
//! and no padding. Any other tokenizer is encoded by `tokenizers` alone.

use std::collections::HashMap;

use tokenizers::Model as _;
use tokenizers::models::ModelWrapper;

/// The word-split pattern of Qwen2, Qwen2.5 and Qwen3 `tokenizer.json` files.
pub const QWEN2_SPLIT_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The fast path of one tokenizer (see the module docs).
#[derive(Debug)]
pub(crate) struct FastPath {
    /// Matches every added token, longest first at a position (`tokenizers`' leftmost-longest).
    added: regex::Regex,
    /// Added token text to id.
    added_ids: HashMap<String, u32>,
    /// The byte-level pre-tokenizer's byte-to-char table.
    byte_chars: [char; 256],
}

/// GPT-2's byte-to-unicode table, as the byte-level pre-tokenizer maps bytes: printable
/// Latin-1 bytes map to themselves, the others to U+0100 onwards in byte order.
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let keep = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let code = if keep {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

/// Whether `tok`'s pipeline is the one the fast path reproduces.
fn eligible(tok: &tokenizers::Tokenizer) -> bool {
    let json = |v: serde_json::Result<serde_json::Value>| v.unwrap_or_default();
    let norm = json(serde_json::to_value(tok.get_normalizer()));
    let norm_ok = norm.is_null() || norm == serde_json::json!({"type": "NFC"});
    let pre = json(serde_json::to_value(tok.get_pre_tokenizer()));
    let split = &pre["pretokenizers"][0];
    let byte_level = &pre["pretokenizers"][1];
    let pre_ok = pre["type"] == "Sequence"
        && pre["pretokenizers"]
            .as_array()
            .is_some_and(|a| a.len() == 2)
        && split["type"] == "Split"
        && split["pattern"]["Regex"] == QWEN2_SPLIT_PATTERN
        && split["behavior"] == "Isolated"
        && split["invert"] == false
        && byte_level["type"] == "ByteLevel"
        && byte_level["use_regex"] == false
        && byte_level["add_prefix_space"] == false;
    let model_ok =
        matches!(tok.get_model(), ModelWrapper::BPE(b) if b.dropout.is_none_or(|d| d == 0.0));
    let added_ok = tok.get_added_tokens_decoder().values().all(|t| {
        !t.normalized && !t.lstrip && !t.rstrip && !t.single_word && !t.content.is_empty()
    });
    norm_ok
        && pre_ok
        && model_ok
        && added_ok
        && tok.get_truncation().is_none()
        && tok.get_padding().is_none()
}

impl FastPath {
    /// The fast path of `tok`, when its pipeline is the one this module reproduces.
    pub(crate) fn detect(tok: &tokenizers::Tokenizer) -> Option<Self> {
        if !eligible(tok) {
            return None;
        }
        let added_ids: HashMap<String, u32> = tok
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, t)| (t.content, id))
            .collect();
        let mut texts: Vec<&String> = added_ids.keys().collect();
        texts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        let alternation: Vec<String> = texts.iter().map(|t| regex::escape(t)).collect();
        // Without added tokens: a pattern that never matches.
        let pattern = if alternation.is_empty() {
            r"[^\s\S]".to_owned()
        } else {
            alternation.join("|")
        };
        Some(Self {
            added: regex::Regex::new(&pattern).ok()?,
            added_ids,
            byte_chars: byte_chars(),
        })
    }

    /// Appends the ids of `text` to `out`, as `tok.encode_fast(text, false)` gives them.
    ///
    /// # Errors
    /// The message of a `tokenizers` error.
    pub(crate) fn encode(
        &self,
        tok: &tokenizers::Tokenizer,
        text: &str,
        out: &mut Vec<u32>,
    ) -> Result<(), String> {
        let ModelWrapper::BPE(bpe) = tok.get_model() else {
            return Err("the fast path needs a BPE model".to_owned());
        };
        let mut words = Words {
            bpe,
            byte_chars: &self.byte_chars,
            seen: HashMap::default(),
            mapped: String::new(),
        };
        let mut at = 0;
        for m in self.added.find_iter(text) {
            words.segment(tok, &text[at..m.start()], out)?;
            out.extend(self.added_ids.get(m.as_str()));
            at = m.end();
        }
        words.segment(tok, &text[at..], out)
    }
}

/// One text's word encoder: the BPE model and the ids of the words seen so far.
struct Words<'a, 't> {
    bpe: &'a tokenizers::models::bpe::BPE,
    byte_chars: &'a [char; 256],
    /// Word to the range of `out` holding its ids.
    seen: HashMap<&'t str, (usize, usize), foldhash::fast::RandomState>,
    /// Scratch buffer of the byte-level mapped word.
    mapped: String,
}

impl<'t> Words<'_, 't> {
    /// Appends the ids of a span without added tokens.
    fn segment(
        &mut self,
        tok: &tokenizers::Tokenizer,
        span: &'t str,
        out: &mut Vec<u32>,
    ) -> Result<(), String> {
        if span.is_empty() {
            return Ok(());
        }
        if !span.is_ascii() {
            let enc = tok.encode_fast(span, false).map_err(|e| e.to_string())?;
            out.extend_from_slice(enc.get_ids());
            return Ok(());
        }
        let mut result = Ok(());
        split_ascii(span.as_bytes(), |start, end| {
            if result.is_ok() {
                result = self.word(&span[start..end], out);
            }
        });
        result
    }

    fn word(&mut self, word: &'t str, out: &mut Vec<u32>) -> Result<(), String> {
        if let Some(&(start, len)) = self.seen.get(word) {
            out.extend_from_within(start..start + len);
            return Ok(());
        }
        self.mapped.clear();
        self.mapped
            .extend(word.bytes().map(|b| self.byte_chars[usize::from(b)]));
        let start = out.len();
        let tokens = self.bpe.tokenize(&self.mapped).map_err(|e| e.to_string())?;
        out.extend(tokens.iter().map(|t| t.id));
        self.seen.insert(word, (start, out.len() - start));
        Ok(())
    }
}

const fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

const fn is_newline(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

/// Neither whitespace, letter nor digit (`[^\s\p{L}\p{N}]` on ASCII).
const fn is_other(b: u8) -> bool {
    !is_space(b) && !b.is_ascii_alphanumeric()
}

/// Calls `word(start, end)` for each word of the ASCII `s` in order, as `tokenizers`' split
/// pre-tokenizer with [`QWEN2_SPLIT_PATTERN`] cuts it; the words cover `s`.
pub(crate) fn split_ascii(s: &[u8], mut word: impl FnMut(usize, usize)) {
    let mut i = 0;
    while i < s.len() {
        let end = word_end(s, i);
        word(i, end);
        i = end;
    }
}

/// The end of the pattern's match at `i` (every position matches one alternative).
fn word_end(s: &[u8], i: usize) -> usize {
    let n = s.len();
    let b = s[i];
    let at = |k: usize| s.get(k).copied();
    let letters_from = |mut k: usize| {
        while k < n && s[k].is_ascii_alphabetic() {
            k += 1;
        }
        k
    };
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if b == b'\'' {
        let c1 = at(i + 1).map(|c| c.to_ascii_lowercase());
        let c2 = at(i + 2).map(|c| c.to_ascii_lowercase());
        match (c1, c2) {
            (Some(b's' | b't' | b'm' | b'd'), _) => return i + 2,
            (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => return i + 3,
            _ => {}
        }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if b.is_ascii_alphabetic() {
        return letters_from(i + 1);
    }
    if !is_newline(b) && !b.is_ascii_digit() && at(i + 1).is_some_and(|c| c.is_ascii_alphabetic()) {
        return letters_from(i + 2);
    }
    // \p{N}
    if b.is_ascii_digit() {
        return i + 1;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    let j = if b == b' ' && at(i + 1).is_some_and(is_other) {
        i + 1
    } else {
        i
    };
    if is_other(s[j]) {
        let mut k = j;
        while k < n && is_other(s[k]) {
            k += 1;
        }
        while k < n && is_newline(s[k]) {
            k += 1;
        }
        return k;
    }
    // Whitespace from here: the run of it starting at `i`.
    let mut k = i;
    let mut last_newline = None;
    while k < n && is_space(s[k]) {
        if is_newline(s[k]) {
            last_newline = Some(k);
        }
        k += 1;
    }
    // \s*[\r\n]+ : up to the run's last line break.
    if let Some(l) = last_newline {
        return l + 1;
    }
    // \s+(?!\S) : the run at the end of the text, else all of it but its last character.
    if k == n {
        return n;
    }
    if k - i >= 2 {
        return k - 1;
    }
    // \s+
    k
}

#[cfg(test)]
mod tests;
