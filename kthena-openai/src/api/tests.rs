use super::*;

#[test]
fn every_v1_path_but_the_model_list_is_an_inference_path() {
    let cases = [
        ("/v1/chat/completions", Some(Api::Chat)),
        ("/v1/messages", Some(Api::Messages)),
        ("/v1/completions", Some(Api::Completions)),
        ("/v1/responses", Some(Api::Responses)),
        ("/v1/embeddings", Some(Api::Embeddings)),
        ("/v1/rerank", Some(Api::Rerank)),
        ("/v1/score", Some(Api::Score)),
        ("/v1/audio/transcriptions", Some(Api::Audio)),
        ("/v1/audio/translations", Some(Api::Audio)),
        ("/v1/classify", Some(Api::Other)),
        ("/v1/models", None),
        ("/v1/models/m", None),
        ("/v1/load_lora_adapter", None),
        ("/v1/unload_lora_adapter", None),
        ("/tokenize", None),
        ("/rerank", None),
        ("/v2/rerank", None),
        ("/v1", None),
    ];
    for (path, want) in cases {
        assert_eq!(Api::of_path(path), want, "{path}");
    }
    assert_eq!(Api::Embeddings.prompt_member(), Some("input"));
    assert!(Api::Chat.requires_prompt() && !Api::Embeddings.requires_prompt());
    assert!(Api::Audio.is_multipart() && !Api::Rerank.is_multipart());
}
