//! Unit tests of `openai`: request parsing, the upstream body rewrite, the response probe.

use super::*;

fn parse(s: &str) -> Result<ParsedRequest> {
    parse_request(Bytes::from(s.to_owned()))
}

#[test]
fn prompt_precedence_and_chatml() {
    let r =
        parse(r#"{"model":"m","prompt":"hi","messages":[{"role":"user","content":"x"}]}"#).unwrap();
    assert_eq!(r.prompt, Prompt::Text("hi".into()));
    // Every prompt-bearing member is in the estimated text.
    assert_eq!(r.prompt_text, "hi\n<|im_start|>user\nx<|im_end|>\n");
    let r = parse(
        r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},{"text":"b"}]},{"role":"user"}]}"#,
    )
    .unwrap();
    assert_eq!(
        r.prompt_text,
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
    );
    let r = parse(r#"{"model":"m","instructions":"be brief","input":"q"}"#).unwrap();
    assert_eq!(
        r.prompt_text,
        "<|im_start|>developer\nbe brief<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
    );
    let r = parse(
        r#"{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"z"}]},{"type":"function_call"}]}"#,
    )
    .unwrap();
    // The function call is not a message; its text is still estimated, after the prompt.
    assert_eq!(
        r.prompt_text,
        "<|im_start|>user\nz<|im_end|>\n\n{\"type\":\"function_call\"}"
    );
}

/// Regression: text that chat templates render besides message contents was not
/// estimated, so a prompt moved into a tool call's arguments, a tool description, a
/// refusal or a `function_call_output` passed an input token limit (4,000 characters
/// estimated at 8-15 tokens, or 0).
#[test]
fn tools_tool_calls_and_refusals_are_estimated() {
    let big = "x".repeat(4000);
    let bodies = [
        format!(
            r#"{{"model":"m","messages":[{{"role":"assistant","content":null,"tool_calls":[{{"id":"c","type":"function","function":{{"name":"f","arguments":"{big}"}}}}]}},{{"role":"user","content":"q"}}]}}"#
        ),
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"q"}}],"tools":[{{"type":"function","function":{{"name":"f","description":"{big}"}}}}]}}"#
        ),
        format!(
            r#"{{"model":"m","messages":[{{"role":"assistant","content":[{{"type":"refusal","refusal":"{big}"}}]}},{{"role":"user","content":"q"}}]}}"#
        ),
        format!(
            r#"{{"model":"m","input":[{{"type":"function_call_output","call_id":"c","output":"{big}"}},{{"role":"user","content":"q"}}]}}"#
        ),
    ];
    for body in bodies {
        let r = parse(&body).unwrap();
        assert!(
            estimate_tokens(&r.prompt_text) > 1000,
            "{}: {}",
            estimate_tokens(&r.prompt_text),
            &body[..120]
        );
        // The messages' own rendering still comes first (prefix hashing is unchanged).
        assert!(
            r.prompt_text.starts_with("<|im_start|>"),
            "{}",
            r.prompt_text
        );
    }
}

/// A path reads its own member first: an empty `prompt` beside chat `messages` does not
/// hide them from the estimate, and a malformed extra member is counted as its JSON text.
#[test]
fn the_paths_member_is_the_prompt_and_every_member_is_estimated() {
    let at = |path: &str, s: &str| {
        parse_request_at(Bytes::from(s.to_owned()), prompt_member(path)).unwrap()
    };
    let chat = r#"{"model":"m","prompt":"","messages":[{"role":"user","content":"abcd"}]}"#;
    let r = at("/v1/chat/completions", chat);
    assert_eq!(r.prompt_text, "<|im_start|>user\nabcd<|im_end|>\n");
    assert_eq!(estimate_tokens(&r.prompt_text), 8);
    assert!(matches!(r.prompt, Prompt::Messages(_)));
    let r = at(
        "/v1/completions",
        r#"{"model":"m","prompt":"ab","input":{"x":"yz"}}"#,
    );
    assert_eq!(r.prompt, Prompt::Text("ab".into()));
    assert_eq!(r.prompt_text, "ab\n{\"x\":\"yz\"}");
    // A path whose member is absent falls back to Go's order.
    let r = at("/v1/chat/completions", r#"{"model":"m","prompt":"p"}"#);
    assert_eq!(r.prompt, Prompt::Text("p".into()));
}

#[test]
fn errors() {
    assert!(matches!(parse("{nope"), Err(Error::BadJson { .. })));
    assert!(matches!(parse("[1]"), Err(Error::BadJson { .. })));
    assert!(matches!(
        parse(r#"{"prompt":"x"}"#),
        Err(Error::MissingModel)
    ));
    assert!(matches!(
        parse(r#"{"model":"  ","prompt":"x"}"#),
        Err(Error::MissingModel)
    ));
    assert!(matches!(
        parse(r#"{"model":3,"prompt":"x"}"#),
        Err(Error::MissingModel)
    ));
    assert!(matches!(
        parse(r#"{"model":"m"}"#),
        Err(Error::PromptNotFound)
    ));
}

#[test]
fn tokens_estimate() {
    assert_eq!(estimate_tokens(""), 0);
    assert_eq!(estimate_tokens("abcd"), 1);
    assert_eq!(estimate_tokens("abcde"), 2);
    assert_eq!(estimate_tokens("héllo"), 2);
}

/// Regression: `"stream": "true"` was taken as a plain request, so the stream it got was
/// accounted with no usage; now it is a 400 naming the field, as OpenAI answers.
#[test]
fn a_non_boolean_stream_or_include_usage_is_an_invalid_field() {
    for v in [r#""true""#, "1", "{}"] {
        for (field, body) in [
            ("stream", format!(r#""stream":{v}"#)),
            (
                "stream_options.include_usage",
                format!(r#""stream":true,"stream_options":{{"include_usage":{v}}}"#),
            ),
        ] {
            let e = parse(&format!(r#"{{"model":"a","prompt":"x",{body}}}"#)).unwrap_err();
            assert!(matches!(e, Error::InvalidField { param, .. } if param == field));
            assert_eq!(
                e.to_string(),
                format!("invalid field `{field}`: must be a boolean")
            );
        }
    }
    assert!(
        !parse(r#"{"model":"a","prompt":"x","stream":null}"#)
            .unwrap()
            .stream
    );
}

#[test]
fn upstream_body_rewrites() {
    let raw = r#"{"model":"a", "prompt":"x"}"#;
    let r = parse(raw).unwrap();
    let b = r.upstream_body(None);
    assert_eq!(&b.bytes[..], raw.as_bytes());
    assert!(!b.injected_usage);
    let b = r.upstream_body(Some("a"));
    assert_eq!(&b.bytes[..], raw.as_bytes());
    let b = r.upstream_body(Some("real"));
    let v: Value = serde_json::from_slice(&b.bytes).unwrap();
    assert_eq!(v["model"], "real");

    let r = parse(r#"{"model":"a","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":false}}"#).unwrap();
    let b = r.upstream_body(None);
    assert!(b.injected_usage);
    let v: Value = serde_json::from_slice(&b.bytes).unwrap();
    assert_eq!(v["stream_options"]["include_usage"], true);
    assert_eq!(v["stream_options"]["continuous_usage_stats"], false);

    // Regression: `continuous_usage_stats: true` took effect with the injected
    // `include_usage`, and the client got usage on every chunk it had not asked for.
    let r = parse(r#"{"model":"a","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true,"k":1}}"#).unwrap();
    let b = r.upstream_body(None);
    assert!(b.injected_usage);
    assert_eq!(
        std::str::from_utf8(&b.bytes).unwrap(),
        r#"{"model":"a","prompt":"x","stream":true,"stream_options":{"k":1,"include_usage":true}}"#
    );

    let r = parse(
        r#"{"model":"a","prompt":"x","stream":true,"stream_options":{"include_usage":true}}"#,
    )
    .unwrap();
    assert!(!r.upstream_body(None).injected_usage);
    // The Responses API: streamed as is, only the model rewritten.
    let r = parse(r#"{"model":"a","input":"x","stream":true}"#).unwrap();
    let b = r.upstream_responses_body(None);
    assert!(!b.injected_usage);
    assert_eq!(&b.bytes[..], br#"{"model":"a","input":"x","stream":true}"#);
    let b = r.upstream_responses_body(Some("real"));
    let v: Value = serde_json::from_slice(&b.bytes).unwrap();
    assert_eq!(v["model"], "real");
    assert!(v.get("stream_options").is_none());
}

/// Regression: the output reservation read the first member that was an integer, so
/// `max_completion_tokens: 0` beside `max_tokens: 900` reserved 1 token where vLLM generates
/// 900 (`max_completion_tokens or max_tokens`), `900.0` and `"900"` (which vLLM accepts)
/// fell back to the 256 default, and `n: 8` reserved one choice of eight.
#[test]
fn max_output_tokens_is_read_as_vllm_reads_it() {
    let max = |extra: &str| {
        parse(&format!(r#"{{"model":"m","prompt":"p"{extra}}}"#))
            .unwrap()
            .max_output_tokens
    };
    assert_eq!(max(""), None);
    assert_eq!(max(r#","max_tokens":900"#), Some(900));
    assert_eq!(
        max(r#","max_completion_tokens":0,"max_tokens":900"#),
        Some(900)
    );
    assert_eq!(
        max(r#","max_completion_tokens":5,"max_tokens":900"#),
        Some(5)
    );
    assert_eq!(max(r#","max_tokens":900.0"#), Some(900));
    assert_eq!(max(r#","max_tokens":"900""#), Some(900));
    assert_eq!(max(r#","max_tokens":9.5"#), None);
    assert_eq!(max(r#","max_tokens":-3"#), None);
    assert_eq!(max(r#","max_output_tokens":40"#), Some(40));
    assert_eq!(max(r#","max_tokens":900,"n":8"#), Some(7200));
    assert_eq!(max(r#","max_tokens":100,"n":2,"best_of":5"#), Some(500));
    assert_eq!(max(r#","max_tokens":1,"n":1000000"#), Some(MAX_CHOICES));
    assert_eq!(
        max(r#","max_tokens":18446744073709551615,"n":4"#),
        Some(u64::MAX)
    );
}
