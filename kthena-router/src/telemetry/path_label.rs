//! The bounded `path` label of the request metrics.

/// The `path` label: the request path for the OpenAI and vLLM paths the router knows, else
/// `other`. Every `POST /v1/*` naming a model is routed (and, in Gateway API mode, any path an
/// HTTPRoute matches), so a client choosing its path must not be able to mint one series per
/// path: the label set stays bounded; the access log keeps the exact path.
pub(crate) fn path_label(path: &str) -> &'static str {
    const KNOWN: [&str; 21] = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
        "/v1/messages",
        "/v1/models",
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
        "/v1/rerank",
        "/v1/score",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/audio/speech",
        "/v1/images/generations",
        "/v1/images/edits",
        "/v1/moderations",
        "/v1/pooling",
        "/v1/classify",
        "/v1/tokenize",
        "/v1/detokenize",
        "/v1/messages/count_tokens",
    ];
    KNOWN
        .iter()
        .find(|p| **p == path)
        .copied()
        .unwrap_or("other")
}
