//! AdmissionReview bodies posted to the controller's webhooks.

use kthena_controller::webhook::{Action, review};
use serde_json::Value;

/// Answers `data` as both a validating and a mutating review: the answer is always a JSON
/// `AdmissionReview` with a `response` whose `allowed` is a boolean, and its `uid` echoes the
/// request's when the request had one.
pub fn admission_review(data: &[u8]) {
    let uid = serde_json::from_slice::<Value>(data).ok().and_then(|v| {
        v.pointer("/request/uid")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    for action in [Action::Validate, Action::Mutate] {
        let out = review(action, data);
        let v: Value = serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("the answer is not JSON: {e}: {out:?}"));
        assert_eq!(
            v.get("kind").and_then(Value::as_str),
            Some("AdmissionReview")
        );
        let allowed = v.pointer("/response/allowed");
        assert!(
            matches!(allowed, Some(Value::Bool(_))),
            "no response.allowed: {v}"
        );
        if let (Some(uid), Some(Value::Bool(true))) = (&uid, allowed) {
            let got = v.pointer("/response/uid").and_then(Value::as_str);
            assert_eq!(
                got,
                Some(uid.as_str()),
                "an allowed answer must echo the uid"
            );
        }
    }
}
