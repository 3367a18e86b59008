//! Client request bodies: parsing and the upstream body the router builds from them.

use bytes::Bytes;
use kthena_openai::{
    Api, ParsedRequest, estimate_tokens, parse_request, parse_request_for, remote_body,
};
use serde_json::Value;

const REWRITTEN: &str = "fuzz-rewritten-model";

/// Parses `data` as an OpenAI request of every API ([`parse_request_for`]: its prompt text
/// starts with the rendered prompt); when it parses without a path, every upstream body the router could
/// send must be a JSON object that parses again as the same request (same stream flag and
/// prompt), carry the rewritten `model`, and ask for usage exactly when it says it injected
/// that. Without a change the original bytes go upstream.
pub fn openai_request(data: &[u8]) {
    // The pooling APIs and any other `/v1/` path: the same prompt invariant, no panic.
    for api in [Api::Embeddings, Api::Rerank, Api::Score, Api::Other] {
        if let Ok(r) = parse_request_for(Bytes::copy_from_slice(data), api) {
            assert!(r.prompt_text.starts_with(&r.prompt.render()));
            let _ = estimate_tokens(&r.prompt_text);
        }
    }
    let Ok(req) = parse_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    // The prompt first, then any other prompt-bearing member (all of it is estimated).
    assert!(req.prompt_text.starts_with(&req.prompt.render()));
    let _ = estimate_tokens(&req.prompt_text);
    let _ = remote_body(&req.model, &req.prompt);
    for responses_api in [false, true] {
        for rewrite in [None, Some(REWRITTEN), Some(req.model.as_str())] {
            check_upstream(&req, rewrite, responses_api);
        }
    }
}

fn check_upstream(req: &ParsedRequest, rewrite: Option<&str>, responses_api: bool) {
    let up = if responses_api {
        req.upstream_responses_body(rewrite)
    } else {
        req.upstream_body(rewrite)
    };
    let changed = rewrite.is_some_and(|m| m != req.model) || up.injected_usage;
    if !changed {
        assert_eq!(
            up.bytes, req.raw,
            "an unchanged body must be forwarded byte for byte"
        );
        return;
    }
    let again = parse_request(up.bytes.clone())
        .unwrap_or_else(|e| panic!("the upstream body no longer parses: {e}: {:?}", up.bytes));
    assert_eq!(again.model, rewrite.unwrap_or(&req.model));
    assert_eq!(again.stream, req.stream);
    assert_eq!(again.prompt, req.prompt);
    if up.injected_usage {
        assert!(!responses_api && req.stream && !req.client_wants_usage);
        let include = again
            .body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"));
        assert_eq!(include, Some(&Value::Bool(true)));
    }
}
