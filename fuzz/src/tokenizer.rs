//! Prompts through the tokenizer's prompt-prefix cache.

use std::path::PathBuf;
use std::sync::OnceLock;

use kthena_tokenize::Tokenizer;

/// Where the Qwen3 `tokenizer.json` and `tokenizer_config.json` are: `$KTHENA_TOKENIZER_DIR`,
/// else `shared/tokenizers/qwen3` beside the checkout, else `/work/shared/tokenizers/qwen3`.
#[must_use]
pub fn tokenizer_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KTHENA_TOKENIZER_DIR") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3");
    if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/tokenizers/qwen3")
    }
}

/// A small cache (8 prefixes) so that fuzzing evicts all the time. The router's
/// `ModelTokenizer` only wraps this type (adding the model's name to its errors).
fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = tokenizer_dir();
        Tokenizer::load(
            &dir.join("tokenizer.json"),
            Some(&dir.join("tokenizer_config.json")),
            8,
        )
        .unwrap_or_else(|e| panic!("loading the Qwen3 tokenizer from {}: {e}", dir.display()))
    })
}

/// Tokenizes `data` (as text) twice through the shared cache, with and without special
/// tokens: both results must equal the uncached tokenization (a wrong cut point or a stale
/// prefix would differ). The text is also rendered as one chat message.
pub fn tokenizer_cache(data: &[u8]) {
    let tok = tokenizer();
    let text = crate::text(data);
    for special in [true, false] {
        let want = tok.encode_uncached(&text, special).ok();
        for _ in 0..2 {
            let got = tok.encode(&text, special).ok().map(|(ids, _)| ids);
            assert_eq!(
                got, want,
                "the prefix cache changed the tokens (special={special})"
            );
        }
    }
    if let Ok(rendered) = tok.render_chat(&[("user", text.as_ref())]) {
        let _ = tok.encode(&rendered, false);
    }
}
