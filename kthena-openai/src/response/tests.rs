//! Unit tests of `response`: usage reading and the response probe.

use serde_json::Value;

use super::*;

#[test]
fn usage_parsing() {
    let v: Value = serde_json::json!({"usage":{"prompt_tokens":3,"completion_tokens":5}});
    assert_eq!(
        usage_of(&v),
        Some(Usage {
            prompt_tokens: 3,
            completion_tokens: 5
        })
    );
    let v: Value = serde_json::json!({"response":{"usage":{"input_tokens":2,"output_tokens":4}}});
    assert_eq!(
        usage_of(&v),
        Some(Usage {
            prompt_tokens: 2,
            completion_tokens: 4
        })
    );
    assert_eq!(usage_of(&serde_json::json!({"usage":null})), None);
    // vLLM's rerank answer counts only `total_tokens`: all of them input.
    let v: Value = serde_json::json!({"usage":{"total_tokens":9}});
    assert_eq!(
        usage_of(&v),
        Some(Usage {
            prompt_tokens: 9,
            completion_tokens: 0
        })
    );
    for body in [
        r#"{"usage":{"completion_tokens":7},"choices":[]}"#,
        r#"{"usage":null,"choices":[],"response":{"usage":{"output_tokens":3}}}"#,
        r#"{"response":{"usage":{"input_tokens":2,"output_tokens":3}},"choices":[1]}"#,
        r#"{"response":[{"usage":{"output_tokens":3}}],"usage":{"x":1},"choices":{}}"#,
        r#"{"usage":{"completion_tokens":1},"usage":{"completion_tokens":2},"choices":"a"}"#,
        r#"{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":4}}"#,
    ] {
        let v: Value = serde_json::from_str(body).unwrap();
        let p = ResponseProbe::parse(body.as_bytes()).unwrap();
        assert_eq!(p.usage(), usage_of(&v), "{body}");
        let usage_only = v.get("usage").is_some_and(|u| !u.is_null())
            && v.get("choices")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty);
        assert_eq!(p.usage_only(), usage_only, "{body}");
    }
    assert!(ResponseProbe::parse(b"[1]").is_none());
    assert!(ResponseProbe::parse(b"{\"usage\":").is_none());
}
