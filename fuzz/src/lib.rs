//! `kthena-fuzz`: one harness per place where Kthena reads bytes it does not control.
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
//! | target | reads | parser |
//! |---|---|---|
//! | `openai_request` | client request bodies | `parse_request`, `upstream_body`, `upstream_responses_body`, `remote_body` |
//! | `sse_filter` | engine streaming and JSON responses | `SseFilter`, `ResponseProbe`, `usage_of` |
//! | `engine_metrics` | engine `/metrics` (vLLM, SGLang, llama.cpp) and `/v1/models` | `kthena_engine_metrics`: `parse_metrics`, `family`, `parse_models` |
//! | `kv_events` | ZMQ KV-event messages (vLLM array and map encodings, SGLang) | `split_frames`, `decode_batch`, `Ingest::apply_payload` |
//! | `manifests` | ModelRoute, ModelServer, ModelServing, ... YAML | `kthena_api::load_str_each`, defaults, validation |
//! | `router_config` | the router's YAML config | `Config::from_yaml`, `apply_env`, `validate`, `parse_go_duration` |
//! | `tokenizer_cache` | prompts, through the prompt-prefix cache | `ModelTokenizer::encode` against `encode_uncached` |
//! | `admission_review` | AdmissionReview bodies the API server posts | `kthena_controller::webhook::review` |
//!
//! Feature `router` (default) brings every target but `admission_review`, feature `admission`
//! (default) brings `admission_review`: a libFuzzer build of the router's targets does not
//! compile the controller.

#[cfg(feature = "admission")]
mod admission;
#[cfg(feature = "router")]
mod config;
#[cfg(feature = "router")]
mod engine;
#[cfg(feature = "router")]
mod kv;
#[cfg(feature = "router")]
mod openai;
#[cfg(feature = "router")]
mod tokenizer;

#[cfg(feature = "admission")]
pub use admission::admission_review;
#[cfg(feature = "router")]
pub use config::{manifests, router_config};
#[cfg(feature = "router")]
pub use engine::{engine_metrics, sse_filter};
#[cfg(feature = "router")]
pub use kv::kv_events;
#[cfg(feature = "router")]
pub use openai::openai_request;
#[cfg(feature = "router")]
pub use tokenizer::{tokenizer_cache, tokenizer_dir};

/// A harness: feeds one input to a parser, panics on a broken invariant.
pub type Harness = fn(&[u8]);

/// Every target of the enabled features by name, as `fuzz/libfuzzer/fuzz_targets/<name>.rs`
/// and `fuzz/seeds/<name>/` name it.
pub const TARGETS: &[(&str, Harness)] = &[
    #[cfg(feature = "router")]
    ("openai_request", openai_request),
    #[cfg(feature = "router")]
    ("sse_filter", sse_filter),
    #[cfg(feature = "router")]
    ("engine_metrics", engine_metrics),
    #[cfg(feature = "router")]
    ("kv_events", kv_events),
    #[cfg(feature = "router")]
    ("manifests", manifests),
    #[cfg(feature = "router")]
    ("router_config", router_config),
    #[cfg(feature = "router")]
    ("tokenizer_cache", tokenizer_cache),
    #[cfg(feature = "admission")]
    ("admission_review", admission_review),
];

/// The input as text: invalid UTF-8 replaced, as the parsers that take `&str` would never
/// see it otherwise.
#[cfg(feature = "router")]
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}
