use tower::ServiceExt;

use super::*;
use crate::pipeline::test_util;

#[tokio::test]
async fn parses_the_body_and_leaves_it_for_the_next_stage() {
    let (shared, _) = test_util::shared(&[]);
    let (seen, inner) = test_util::recorder::<Ctx<()>>();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let req = test_util::request(&shared, "/v1/chat/completions", body);
    let resp = ParseLayer::new(Arc::clone(&shared))
        .layer(inner)
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let p = seen.lock().unwrap().take().unwrap().parsed;
    assert_eq!(p.req.model, "m");
    assert!(p.req.stream);
}

#[tokio::test]
async fn rejects_paths_methods_and_bad_bodies_before_the_next_stage() {
    let (shared, _) = test_util::shared(&[]);
    let (seen, inner) = test_util::recorder::<Ctx<()>>();
    let svc = ParseLayer::new(Arc::clone(&shared)).layer(inner);
    let cases = [
        ("/v1/embeddings", "{}", "unknown_url"),
        ("/v1/completions", "{", "invalid_json"),
        ("/v1/completions", r#"{"prompt":"x"}"#, "missing_model"),
        ("/v1/completions", r#"{"model":"m"}"#, "missing_prompt"),
    ];
    for (path, body, code) in cases {
        let e = svc
            .clone()
            .oneshot(test_util::request(&shared, path, body))
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{path} {body}");
    }
    let get = test_util::request_with(&shared, Method::GET, "/v1/completions", "");
    let e = svc.clone().oneshot(get).await.unwrap_err();
    assert_eq!(e.code(), "method_not_allowed");
    assert!(seen.lock().unwrap().is_none());
}
