//! The vLLM endpoints other routers call besides generation: prompt rendering, detokenize,
//! version, load and ping, with the Qwen3 tokenizer the vLLM samples were captured with.
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::common;
use crate::common::{post_json, send};
use kthena_sim::{Config, SimHandle, spawn};
use serde_json::{Value, json};

async fn qwen3_sim() -> SimHandle {
    let mut c = Config::default()
        .with_ephemeral_port()
        .with_model("tiny-qwen3")
        .with_time_scale(100.0);
    c.tokenizer = Some(std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/tokenizers/qwen3/tokenizer.json"
    )));
    c.profile.max_model_len = 2048;
    spawn(c).await.unwrap()
}

/// Sends a render request; checks the raw body has vLLM's `GenerateRequest` keys in its
/// order (every object of a list), and returns the parsed body.
async fn render(url: &str, body: &Value) -> (u16, Value) {
    let (status, raw) = send("POST", url, Some(body)).await;
    let text = std::str::from_utf8(&raw).unwrap();
    let parsed: Value = serde_json::from_str(text).unwrap();
    if status == 200 {
        let n = parsed.as_array().map_or(1, Vec::len);
        let positions: Vec<usize> = GENERATE_REQUEST_KEYS
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(positions.is_sorted(), "{text}");
        for k in GENERATE_REQUEST_KEYS {
            assert_eq!(
                text.matches(&format!("\"{k}\":")).count(),
                n,
                "{k} in {text}"
            );
        }
    }
    (status, parsed)
}

const GENERATE_REQUEST_KEYS: [&str; 12] = [
    "request_id",
    "token_ids",
    "assistant_tokens_mask",
    "token_offsets",
    "features",
    "sampling_params",
    "model",
    "stream",
    "stream_options",
    "cache_salt",
    "priority",
    "kv_transfer_params",
];

#[tokio::test]
async fn render_returns_the_token_ids_generation_would_use() {
    let sim = qwen3_sim().await;
    let base = sim.base_url();
    let (status, body) = render(
        &format!("{base}/v1/completions/render"),
        &json!({"model": "tiny-qwen3", "prompt": "Hello, world!", "cache_salt": "s1", "seed": 7}),
    )
    .await;
    assert_eq!(status, 200);
    let list = body.as_array().unwrap();
    assert_eq!(list.len(), 1);
    let r = &list[0];
    // The same ids as vLLM's /tokenize sample (spec/samples/vllm-0.32-cpu/tokenize.json).
    assert_eq!(r["token_ids"], json!([9707, 11, 1879, 0]));
    assert!(r["request_id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(r["model"], "tiny-qwen3");
    assert_eq!(r["cache_salt"], "s1");
    assert_eq!(r["priority"], 0);
    assert_eq!(
        r["sampling_params"],
        json!({"n": 1, "seed": 7, "max_tokens": 16})
    );

    let (status, r) = render(
        &format!("{base}/v1/chat/completions/render"),
        &json!({
            "model": "tiny-qwen3",
            "messages": [{"role": "user", "content": "Hello"}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 5
        }),
    )
    .await;
    assert_eq!(status, 200);
    // The chat template's rendering, as /tokenize gives it.
    assert_eq!(
        r["token_ids"],
        json!([151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198])
    );
    assert!(r["request_id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(r["stream"], true);
    assert_eq!(r["stream_options"], json!({"include_usage": true}));
    assert_eq!(r["sampling_params"]["max_tokens"], 5);

    // Validation is generation's: an unknown model is vLLM's 404.
    for (path, body) in [
        (
            "v1/completions/render",
            json!({"model": "nope", "prompt": "x"}),
        ),
        (
            "v1/chat/completions/render",
            json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
        ),
    ] {
        let (status, err) = render(&format!("{base}/{path}"), &body).await;
        assert_eq!(status, 404);
        assert_eq!(err["error"]["message"], "The model `nope` does not exist.");
    }
    // Rendering generates nothing.
    let text = common::metrics(&base).await;
    assert_eq!(common::metric(&text, "vllm:prompt_tokens_total"), 0.0);
    assert_eq!(common::metric(&text, "vllm:request_success_total"), 0.0);
    sim.kill().await;
}

#[tokio::test]
async fn detokenize_version_load_and_ping() {
    let sim = qwen3_sim().await;
    let base = sim.base_url();
    let (status, body) = post_json(
        &format!("{base}/detokenize"),
        &json!({"model": "tiny-qwen3", "tokens": [9707, 11, 1879, 0]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"prompt": "Hello, world!"}));
    let (status, body) = post_json(
        &format!("{base}/detokenize"),
        &json!({"model": "tiny-qwen3", "tokens": [1, 999_999_999]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "tokens");

    assert_eq!(
        common::get_json(&format!("{base}/version")).await,
        json!({"version": "0.32.0"})
    );
    assert_eq!(
        common::get_json(&format!("{base}/load")).await,
        json!({"server_load": 0})
    );
    assert_eq!(send("GET", &format!("{base}/ping"), None).await.0, 200);
    assert_eq!(send("POST", &format!("{base}/ping"), None).await.0, 200);
    sim.kill().await;
}
