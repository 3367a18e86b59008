//! `kthena-fuzz-k8s`: the fuzz harnesses of what users and the API server hand Kthena as
//! Kubernetes objects, and of the router's config.
//!
//! Each harness is a `fn(&[u8])` that feeds the bytes to the real parser and panics when an
//! invariant is broken (defaulting that changes validity, an AdmissionReview answer that is
//! not one, ...); a panic inside the parser is a bug too. As in `kthena-fuzz` (the hot-path
//! parsers, which build without Kubernetes), `tests/replay.rs` replays every seed of
//! `fuzz/seeds/<target>/` and `fuzz/regressions/<target>/` on stable, and `fuzz/libfuzzer`
//! wraps each harness in a libFuzzer target (`scripts/fuzz.sh`, `docs/reliability.md`).
//!
//! These parsers are kthena-api's, the router's and the controller's, which bring kube: they
//! are kept apart so that the hot-path harnesses build without it.
//!
//! | target | reads | parser |
//! |---|---|---|
//! | `manifests` | ModelRoute, ModelServer, ModelServing, ... YAML | `kthena_api::load_str_each`, defaults, validation, `CompiledRoute::compile` |
//! | `router_config` | the router's YAML config | `Config::from_yaml`, `apply_env`, `validate`, `parse_go_duration` |
//! | `admission_review` | AdmissionReview bodies the API server posts | `kthena_controller::webhook::review` |
//!
//! Feature `router` (default) brings `manifests` and `router_config`, feature `admission`
//! (default) brings `admission_review`: a libFuzzer build of the router's targets does not
//! compile the controller.

#[cfg(feature = "admission")]
mod admission;
#[cfg(feature = "router")]
mod config;

#[cfg(feature = "admission")]
pub use admission::admission_review;
#[cfg(feature = "router")]
pub use config::{manifests, router_config};

/// A harness: feeds one input to a parser, panics on a broken invariant.
pub type Harness = fn(&[u8]);

/// Every target of the enabled features by name, as `fuzz/libfuzzer/fuzz_targets/<name>.rs`
/// and `fuzz/seeds/<name>/` name it.
pub const TARGETS: &[(&str, Harness)] = &[
    #[cfg(feature = "router")]
    ("manifests", manifests),
    #[cfg(feature = "router")]
    ("router_config", router_config),
    #[cfg(feature = "admission")]
    ("admission_review", admission_review),
];

/// The input as text: invalid UTF-8 replaced, as the parsers that take `&str` would never
/// see it otherwise.
#[cfg(feature = "router")]
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}
