use super::*;

#[test]
fn models_list() {
    let body = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/vllm-0.32-models.json"
    ));
    let list = parse_models(body).unwrap();
    assert_eq!(list.ids, vec!["tiny-qwen3".to_owned()]);
    assert!(list.lora_adapters.is_empty());
    let e = parse_models(b"{}").unwrap_err();
    assert!(matches!(e, Error::ModelsShape), "{e:?}");
    assert_eq!(e.to_string(), "invalid /v1/models: no data list");
    let e = parse_models(b"<html>").unwrap_err();
    assert!(matches!(e, Error::ModelsJson(_)), "{e:?}");
    assert!(e.to_string().starts_with("invalid /v1/models: "), "{e}");
    // vLLM with an adapter: the card's `parent` names the base model.
    let with_lora = br#"{"data":[{"id":"lora-sql","parent":"base"},{"id":"base","parent":null}]}"#;
    let list = parse_models(with_lora).unwrap();
    assert_eq!(list.ids, vec!["lora-sql".to_owned(), "base".to_owned()]);
    assert_eq!(list.lora_adapters, vec!["lora-sql".to_owned()]);
    // No `parent` key anywhere: the ids after the first are adapters.
    let plain = br#"{"data":[{"id":"base"},{"id":"a1"}]}"#;
    assert_eq!(
        parse_models(plain).unwrap().lora_adapters,
        vec!["a1".to_owned()]
    );
}
