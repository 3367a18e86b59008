//! Tests of the error type: statuses, codes, bodies.

use super::*;

#[test]
fn error_body_keeps_openai_key_order() {
    let body = openai_error_body(
        "model `x` not found",
        "invalid_request_error",
        Some("model"),
        "model_not_found",
    );
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        r#"{"error":{"message":"model `x` not found","type":"invalid_request_error","param":"model","code":"model_not_found"}}"#
    );
    let body = openai_error_body("bad", "invalid_request_error", None, "invalid_json");
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        r#"{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":"invalid_json"}}"#
    );
}

#[test]
fn statuses_and_shapes() {
    let cases: Vec<(Error, u16, &str)> = vec![
        (Error::MissingModel, 400, "missing_model"),
        (
            Error::ModelNotFound { model: "x".into() },
            404,
            "model_not_found",
        ),
        (Error::BodyTooLarge { limit: 1 }, 413, "request_too_large"),
        (
            Error::BodyTimeout {
                idle: true,
                timeout: Duration::from_secs(1),
            },
            408,
            "request_timeout",
        ),
        (
            Error::NoReadyEndpoint {
                server: "a/b".into(),
            },
            503,
            "no_ready_endpoint",
        ),
        (
            Error::UpstreamTimeout {
                endpoint: "e".into(),
                timeout: Duration::from_secs(1),
            },
            504,
            "upstream_timeout",
        ),
    ];
    for (err, status, code) in cases {
        if code == "no_ready_endpoint" {
            // A router-side failure: the router knows no ready engine; no engine answered.
            assert_eq!(err.side(), Side::Internal);
            assert_eq!(err.origin(), "internal");
        }
        assert_eq!(err.status().as_u16(), status);
        let v: serde_json::Value = serde_json::from_slice(&err.to_body()).unwrap();
        assert_eq!(v["error"]["code"], code);
        assert!(v["error"]["message"].is_string());
        assert!(v["error"]["type"].is_string());
        assert!(v["error"].get("param").is_some());
    }
}
