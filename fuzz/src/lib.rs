//! `kthena-fuzz`: one harness per hot-path place where Kthena reads bytes it does not
//! control, from clients and engines.
//!
//! Each harness is a `fn(&[u8])` that feeds the bytes to the real parser and panics when an
//! invariant the rest of the router relies on is broken (a rewritten body that is not JSON, an
//! SSE filter whose output depends on how the stream was chunked, a cached tokenization that
//! differs from the uncached one, ...). A panic inside the parser itself is a bug too.
//!
//! The same functions run in two ways:
//! - on stable, `tests/replay.rs` replays every seed under `fuzz/seeds/<target>/` (CI);
//! - on nightly, `fuzz/libfuzzer` wraps each one in a libFuzzer target
//!   (`scripts/fuzz.sh TARGET|all SECONDS`, `docs/reliability.md`).
//!
//! The parsers fuzzed here are those of the leaf crates (kthena-openai,
//! kthena-engine-metrics, kthena-kvevents, kthena-sched, kthena-tokenize), so this crate
//! builds without Kubernetes (no kube, no router, no controller; `scripts/check-deps.sh`
//! checks it) and a libFuzzer build of these targets is quick:
//!
//! | target | reads | parser |
//! |---|---|---|
//! | `openai_request` | client request bodies | `parse_request`, `parse_request_for`, `upstream_body`, `upstream_responses_body`, `remote_body` |
//! | `sse_filter` | engine streaming and JSON responses | `SseFilter`, `ResponseProbe`, `usage_of` |
//! | `engine_metrics` | engine `/metrics` (vLLM, SGLang, llama.cpp) and `/v1/models` | `kthena_engine_metrics`: `parse_metrics`, `family`, `parse_models` |
//! | `kv_events` | ZMQ KV-event messages (vLLM array and map encodings, SGLang) | `split_frames`, `decode_batch`, `InMemoryKvIndex::apply` |
//! | `tokenizer_cache` | prompts, through the prompt-prefix cache | `kthena_tokenize::Tokenizer::encode` against `encode_uncached` |
//!
//! The targets that read Kubernetes objects and the router's config (`manifests`,
//! `router_config`, `admission_review`) need kthena-api, the router and the controller, and
//! with them kube: they are in `fuzz/k8s` (crate `kthena-fuzz-k8s`), over the same
//! `fuzz/seeds/` and `fuzz/regressions/` directories.

mod engine;
mod kv;
mod openai;
mod tokenizer;

pub use engine::{engine_metrics, sse_filter};
pub use kv::kv_events;
pub use openai::openai_request;
pub use tokenizer::{tokenizer_cache, tokenizer_dir};

/// A harness: feeds one input to a parser, panics on a broken invariant.
pub type Harness = fn(&[u8]);

/// Every target by name, as `fuzz/libfuzzer/fuzz_targets/<name>.rs` and
/// `fuzz/seeds/<name>/` name it.
pub const TARGETS: &[(&str, Harness)] = &[
    ("openai_request", openai_request),
    ("sse_filter", sse_filter),
    ("engine_metrics", engine_metrics),
    ("kv_events", kv_events),
    ("tokenizer_cache", tokenizer_cache),
];

/// The input as text: invalid UTF-8 replaced, as the parsers that take `&str` would never
/// see it otherwise.
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Feeds every seed of `root/seeds/<target>/` and every reproducer of
/// `root/regressions/<target>/` (each sorted by name) to `harness`; the number of seeds. The
/// replay tests of this crate and of `kthena-fuzz-k8s` share it.
///
/// # Panics
/// When a file of those folders cannot be read, or when `harness` panics on it.
pub fn replay_dir(root: &std::path::Path, target: &str, harness: Harness) -> usize {
    let inputs = |dir: std::path::PathBuf| {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.retain(|p| p.is_file());
        files.sort();
        files
    };
    let seeds = inputs(root.join("seeds").join(target));
    let regressions = inputs(root.join("regressions").join(target));
    for file in seeds.iter().chain(&regressions) {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        harness(&data);
    }
    seeds.len()
}
