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
        ("/tokenize", "{}", "unknown_url"),
        ("/v1/embeddings", r#"{"input":"x"}"#, "missing_model"),
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

#[tokio::test]
async fn any_v1_path_with_a_model_is_parsed_by_its_api() {
    let (shared, _) = test_util::shared(&[]);
    let svc = |inner| ParseLayer::new(Arc::clone(&shared)).layer(inner);
    let (seen, inner) = test_util::recorder::<Ctx<()>>();
    let body = r#"{"model":"e","input":["alpha","beta"]}"#;
    let req = test_util::request(&shared, "/v1/embeddings", body);
    svc(inner).oneshot(req).await.unwrap();
    let p = seen.lock().unwrap().take().unwrap().parsed;
    assert_eq!(
        (p.req.model.as_str(), p.req.prompt_text.as_str()),
        ("e", "alpha\nbeta")
    );

    let (seen, inner) = test_util::recorder::<Ctx<()>>();
    let form = "--b1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--b1\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--b1--\r\n";
    let mut req = test_util::request(&shared, "/v1/audio/transcriptions", form);
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "multipart/form-data; boundary=b1".parse().unwrap(),
    );
    svc(inner).oneshot(req).await.unwrap();
    let p = seen.lock().unwrap().take().unwrap().parsed;
    assert_eq!(p.req.model, "whisper");
    assert_eq!(p.req.raw, form.as_bytes());
    assert_eq!(p.req.prompt_text, "");
}
