use bytes::Bytes;

use crate::{Api, Error, Prompt, parse_request_for};

fn parse(api: Api, body: &str) -> crate::Result<crate::ParsedRequest> {
    parse_request_for(Bytes::from(body.to_owned()), api)
}

#[test]
fn embeddings_read_input_in_every_shape() {
    let cases = [
        (r#"{"model":"e","input":"hello"}"#, "hello"),
        (r#"{"model":"e","input":["a","b"]}"#, "a\nb"),
        (r#"{"model":"e","input":[1,2,3]}"#, "1\n2\n3"),
        (r#"{"model":"e","input":[[1,2],[3]]}"#, "[1,2]\n[3]"),
        (
            r#"{"model":"e","messages":[{"role":"user","content":"hi"}]}"#,
            "<|im_start|>user\nhi<|im_end|>\n",
        ),
        (r#"{"model":"e"}"#, ""),
    ];
    for (body, text) in cases {
        let p = parse(Api::Embeddings, body).unwrap();
        assert_eq!(p.model, "e");
        assert_eq!(p.prompt_text, text, "{body}");
        assert_eq!(p.max_output_tokens, Some(0));
    }
    let e = parse(Api::Embeddings, r#"{"model":"e","input":5}"#).unwrap_err();
    assert!(matches!(e, Error::InvalidField { param: "input", .. }));
}

#[test]
fn rerank_and_score_read_the_query_then_the_documents() {
    let p = parse(
        Api::Rerank,
        r#"{"model":"r","query":"q","documents":["d1",{"text":"d2"}]}"#,
    )
    .unwrap();
    assert_eq!(p.prompt, Prompt::Text("q\nd1\nd2".into()));
    assert_eq!(p.prompt_text, "q\nd1\nd2");
    let p = parse(
        Api::Score,
        r#"{"model":"r","text_1":"a","text_2":["b","c"]}"#,
    )
    .unwrap();
    assert_eq!(p.prompt_text, "a\nb\nc");
    let p = parse(Api::Score, r#"{"model":"r"}"#).unwrap();
    assert_eq!(p.prompt_text, "");
}

#[test]
fn other_paths_need_a_model_but_no_prompt() {
    let p = parse(Api::Other, r#"{"model":"m","prompt":"hi"}"#).unwrap();
    assert_eq!(p.prompt_text, "hi");
    let p = parse(Api::Other, r#"{"model":"m","tokens":[1,2]}"#).unwrap();
    assert_eq!(p.prompt, Prompt::Text(String::new()));
    assert_eq!(
        parse(Api::Other, r#"{"tokens":[1]}"#).unwrap_err(),
        Error::MissingModel
    );
    assert_eq!(
        parse(Api::Chat, r#"{"model":"m"}"#).unwrap_err(),
        Error::PromptNotFound
    );
}

#[test]
fn a_form_is_forwarded_as_received() {
    let raw = Bytes::from_static(b"--b\r\n...");
    let p = crate::ParsedRequest::form(raw.clone(), "whisper".into());
    let up = p.upstream_body(Some("other"));
    assert_eq!(up.bytes, raw);
    assert!(!up.injected_usage);
}
