//! Regression tests of the request, response and config parsers for inputs found by fuzzing
//! (`fuzz/`, docs/reliability.md); the inputs themselves are replayed from
//! `fuzz/regressions/` by `cargo test -p kthena-fuzz -p kthena-fuzz-k8s`.

#![allow(clippy::unwrap_used, reason = "tests fail on any unexpected error")]

use bytes::Bytes;
use kthena_openai::{ResponseProbe, parse_request};
use serde_json::Value;

/// Found by the `openai_request` target: a rewritten body was serialized again from parsed
/// values, so numbers that `f64` cannot hold reached the engine changed (the token-id prompt
/// `[111…1]` (82 digits) became `1.1111111111111108e81`, a `seed` of 2^64 a float). Only
/// `model` and `stream_options` change now; every other member, duplicates and spacing
/// inside values included, goes upstream as the client wrote it.
#[test]
fn upstream_body_keeps_every_other_member_verbatim() {
    let digits = "1".repeat(82);
    let tail = r#""seed":18446744073709551616,"temperature":0.1000000000000000055511151231257827,"n":[1, 2.50],"stream":true"#;
    let raw = format!(
        r#"{{"model":"a","prompt":[{digits}],{tail},"stream_options":{{"continuous_usage_stats":false,"include_usage":false}},"model":"b"}}"#
    );
    let r = parse_request(Bytes::from(raw)).unwrap();
    assert_eq!(r.model, "b");
    let b = r.upstream_body(Some("real"));
    assert!(b.injected_usage);
    assert_eq!(
        std::str::from_utf8(&b.bytes).unwrap(),
        format!(
            r#"{{"model":"real","prompt":[{digits}],{tail},"stream_options":{{"continuous_usage_stats":false,"include_usage":true}},"model":"real"}}"#
        )
    );
    let again = parse_request(b.bytes).unwrap();
    assert_eq!(again.prompt, r.prompt);
    assert_eq!(again.model, "real");

    // No `stream_options`: appended; a null one: replaced.
    let with_usage =
        br#"{"model":"a","prompt":"x","stream":true,"stream_options":{"include_usage":true}}"#;
    for raw in [
        r#"{"model":"a","prompt":"x","stream":true}"#,
        r#"{"model":"a","prompt":"x","stream":true,"stream_options":null}"#,
    ] {
        let r = parse_request(Bytes::from(raw)).unwrap();
        assert_eq!(&r.upstream_body(None).bytes[..], with_usage, "{raw}");
    }
    // The Responses API: only the model.
    let r = parse_request(Bytes::from(
        r#"{"model":"a","input":"x","seed":1e2,"stream":true}"#,
    ))
    .unwrap();
    assert_eq!(
        &r.upstream_responses_body(Some("real")).bytes[..],
        br#"{"model":"real","input":"x","seed":1e2,"stream":true}"#
    );
}

/// Found by the `sse_filter` target: a number outside `f64`'s range in a field the probe
/// skips made it accept what serde_json (and so `usage_of`) rejects.
#[test]
fn response_probe_rejects_what_serde_json_rejects() {
    for body in [
        r#"{"choices":[],"created":1e96038425}"#,
        r#"{"choices":[],"x":{"y":[1,-1e400]}}"#,
        r#"{"response":{"id":1e400,"usage":{"output_tokens":3}}}"#,
    ] {
        assert!(serde_json::from_str::<Value>(body).is_err(), "{body}");
        assert!(ResponseProbe::parse(body.as_bytes()).is_none(), "{body}");
    }
    let ok = r#"{"choices":[],"created":1e300,"usage":{"completion_tokens":2}}"#;
    assert!(ResponseProbe::parse(ok.as_bytes()).unwrap().usage_only());
}

/// A body that starts with a UTF-8 byte order mark parses (Python's `json.loads`, and so
/// vLLM, accepts it) and goes upstream without the mark; a null `stream_options` or prompt
/// member counts as absent.
#[test]
fn byte_order_mark_and_null_members() {
    let r = parse_request(Bytes::from_static(
        b"\xEF\xBB\xBF{\"model\":\"m\",\"prompt\":\"hi\"}",
    ))
    .unwrap();
    assert_eq!(r.model, "m");
    assert_eq!(&r.raw[..], br#"{"model":"m","prompt":"hi"}"#);
    assert_eq!(
        &r.upstream_body(Some("real")).bytes[..],
        br#"{"model":"real","prompt":"hi"}"#
    );
    let r = parse_request(Bytes::from_static(
        br#"{"model":"m","prompt":null,"messages":[{"role":"user","content":"x"}],"stream_options":null}"#,
    ))
    .unwrap();
    assert_eq!(r.prompt_text, "<|im_start|>user\nx<|im_end|>\n");
    assert!(!r.client_wants_usage);
}

/// Found by the `router_config` target: a Go duration whose component is beyond
/// `std::time::Duration`'s range (or has a sign inside) panicked in the duration parser;
/// now it is a config error that names the value.
#[test]
fn durations_beyond_range_are_config_errors() {
    use kthena_router::{DurationProblem, Error, parse_go_duration};
    let err = parse_go_duration("88888888888888888888888888888h").unwrap_err();
    assert!(
        matches!(&err, Error::InvalidDuration { value, problem: DurationProblem::TooLarge } if value == "88888888888888888888888888888h"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "`88888888888888888888888888888h` is larger than the largest Go duration (2562047h47m16.854775807s)"
    );
    let err = parse_go_duration("1h-5m").unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidDuration {
                problem: DurationProblem::Syntax,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "`1h-5m` is not a duration: expected a number with a unit (`ns`, `us`, `ms`, `s`, `m`, `h`), such as `500ms`, `10s` or `1m30s`"
    );
    let err = parse_go_duration(" 10 ").unwrap_err();
    assert_eq!(err.to_string(), "`10` has no unit: did you mean `10s`?");
    let err = parse_go_duration("-1s").unwrap_err();
    assert_eq!(
        err.to_string(),
        "`-1s` is negative: a duration must be 0 or more"
    );
    assert_eq!(
        parse_go_duration("1m30s").ok(),
        Some(std::time::Duration::from_secs(90))
    );
    let text = "drainTimeout: 99999999999999999999999h\n";
    let err = kthena_router::Config::from_yaml(std::path::Path::new("r.yaml"), text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is larger than the largest Go duration"),
        "{err}"
    );
}
