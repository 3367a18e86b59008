//! HTTP API tests over real sockets: response shapes, SSE, errors, LoRA, faults, harness.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use crate::common::{cfg, get_json, metric, metrics, post_json, send, stream};
use kthena_sim::{Faults, Flavor, spawn, spawn_many};
use serde_json::{Value, json};

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[tokio::test]
async fn completion_shape_matches_vllm() {
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/completions", sim.base_url());
    let (status, body) = post_json(
        &url,
        &json!({"model": "tiny-qwen3", "prompt": [1, 2, 3, 4, 5, 6, 7], "max_tokens": 5}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(body["model"], "tiny-qwen3");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 7, "total_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": null, "completion_tokens_details": null})
    );
    let sample: Value =
        serde_json::from_str(include_str!("../fixtures/vllm-0.32-cpu/completion.json")).unwrap();
    assert_eq!(keys(&body), keys(&sample));
    assert_eq!(keys(&body["choices"][0]), keys(&sample["choices"][0]));
    // Same prompt, same seed: same text (determinism).
    let (_, again) = post_json(
        &url,
        &json!({"model": "tiny-qwen3", "prompt": [1, 2, 3, 4, 5, 6, 7], "max_tokens": 5}),
    )
    .await;
    assert_eq!(again["choices"][0]["text"], body["choices"][0]["text"]);
    // Completions default to 16 tokens, as in vLLM.
    let (_, dflt) = post_json(&url, &json!({"model": "tiny-qwen3", "prompt": "Hello"})).await;
    assert_eq!(dflt["usage"]["completion_tokens"], 16);
    // `"stream": null` is as absent (vLLM's `Optional[bool]`); it was a 400.
    for path in ["/v1/completions", "/v1/chat/completions", "/v1/responses"] {
        let (status, body) = post_json(
            &format!("{}{path}", sim.base_url()),
            &json!({"model": "tiny-qwen3", "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}], "input": "Hi", "max_tokens": 2, "stream": null}),
        )
        .await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    sim.kill().await;
}

#[tokio::test]
async fn chat_shape_and_stream_match_vllm() {
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let req = json!({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6});
    let (status, body) = post_json(&url, &req).await;
    assert_eq!(status, 200);
    let sample: Value =
        serde_json::from_str(include_str!("../fixtures/vllm-0.32-cpu/chat.json")).unwrap();
    assert_eq!(keys(&body), keys(&sample));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["usage"]["completion_tokens"], 6);

    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let (status, events, clean) = stream(&url, &sreq).await;
    assert_eq!(status, 200);
    assert!(clean);
    // role chunk + 6 token chunks + usage chunk + [DONE]
    assert_eq!(events.len(), 9, "{events:?}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..8]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(chunks[0]["prompt_token_ids"], Value::Null);
    assert!(chunks[0].as_object().unwrap().contains_key("prompt_text"));
    for c in &chunks[1..6] {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
        assert!(c["choices"][0]["delta"]["content"].as_str().is_some());
    }
    assert_eq!(chunks[6]["choices"][0]["finish_reason"], "length");
    assert!(
        chunks[6]["choices"][0]
            .as_object()
            .unwrap()
            .contains_key("stop_reason")
    );
    assert_eq!(chunks[7]["choices"], json!([]));
    assert_eq!(chunks[7]["usage"]["completion_tokens"], 6);
    assert_eq!(
        chunks[7]["usage"]["total_tokens"],
        chunks[7]["usage"]["prompt_tokens"].as_u64().unwrap() + 6
    );
    assert_layout_like_vllm(&chunks);

    // Without include_usage there is no usage chunk.
    sreq["stream_options"] = json!({"include_usage": false});
    let (_, events, _) = stream(&url, &sreq).await;
    assert_eq!(events.len(), 8);
    sim.kill().await;
}

/// The first, a token, the finishing and the usage chunk of a chat stream have the keys (and
/// choice keys) of the captured vLLM stream's.
fn assert_layout_like_vllm(chunks: &[Value]) {
    let sample = include_str!("../fixtures/vllm-0.32-cpu/chat-stream.sse");
    let sample_events: Vec<Value> = sample
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    for i in [0, 1, 6, 7] {
        let (ours, theirs) = (&chunks[i], &sample_events[i]);
        assert_eq!(keys(ours), keys(theirs));
        if let (Some(x), Some(y)) = (ours["choices"].get(0), theirs["choices"].get(0)) {
            assert_eq!(keys(x), keys(y));
        }
    }
}

#[tokio::test]
async fn completion_stream_ends_with_done() {
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/completions", sim.base_url());
    let (status, events, clean) = stream(
        &url,
        &json!({"model": "tiny-qwen3", "prompt": "Hi", "max_tokens": 3, "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(clean);
    assert_eq!(events.len(), 4);
    let last: Value = serde_json::from_str(&events[2]).unwrap();
    assert_eq!(last["object"], "text_completion");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(events[3], "[DONE]");
    sim.kill().await;
}

#[tokio::test]
async fn errors_use_the_engine_shape() {
    let mut c = cfg();
    c.profile.max_model_len = 2048;
    let sim = spawn(c).await.unwrap();
    let url = format!("{}/v1/completions", sim.base_url());
    let prompt: Vec<u32> = (0..2049).collect();
    let (status, body) = post_json(&url, &json!({"model": "tiny-qwen3", "prompt": prompt})).await;
    assert_eq!(status, 400);
    // The capture holds the body on line 1 and the status on line 2.
    let capture = include_str!("../fixtures/vllm-0.32-cpu/error-context-length.json");
    let sample: Value = serde_json::from_str(capture.lines().next().unwrap()).unwrap();
    assert_eq!(capture.lines().nth(1), Some("400"));
    assert_eq!(body, sample);
    let (status, body) = post_json(&url, &json!({"model": "nope", "prompt": "x"})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "NotFoundError");
    assert_eq!(body["error"]["message"], "The model `nope` does not exist.");
    let (status, body) = post_json(
        &url,
        &json!({"model": "tiny-qwen3", "prompt": [1, 2], "max_tokens": 2047}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "max_tokens");
    let (status, _) = send("POST", &url, None).await;
    assert_eq!(status, 400);
    sim.kill().await;
}

#[tokio::test]
async fn lora_load_unload_visible_in_models_and_metrics() {
    let sim = spawn(cfg()).await.unwrap();
    let base = sim.base_url();
    let (status, _) = send(
        "POST",
        &format!("{base}/v1/load_lora_adapter"),
        Some(&json!({"lora_name": "lora-A", "lora_path": "/adapters/a"})),
    )
    .await;
    assert_eq!(status, 200);
    let models = get_json(&format!("{base}/v1/models")).await;
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["tiny-qwen3", "lora-A"]);
    assert_eq!(models["data"][1]["parent"], "tiny-qwen3");
    assert_eq!(models["data"][1]["root"], "/adapters/a");
    // A LoRA request is reported in vllm:lora_requests_info while it runs.
    let url = format!("{base}/v1/completions");
    let mut long = tokio::task::JoinSet::new();
    long.spawn({
        let url = url.clone();
        async move {
            post_json(
                &url,
                &json!({"model": "lora-A", "prompt": "x", "max_tokens": 200}),
            )
            .await
        }
    });
    let mut seen = false;
    for _ in 0..100 {
        let text = metrics(&base).await;
        if text.contains("running_lora_adapters=\"lora-A\"") {
            seen = true;
            assert!(text.contains("max_lora=\"1\""));
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen);
    let (status, body) = long.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["model"], "lora-A");
    let (status, _) = send(
        "POST",
        &format!("{base}/v1/unload_lora_adapter"),
        Some(&json!({"lora_name": "lora-A"})),
    )
    .await;
    assert_eq!(status, 200);
    let models = get_json(&format!("{base}/v1/models")).await;
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    let (status, _) = send(
        "POST",
        &format!("{base}/v1/unload_lora_adapter"),
        Some(&json!({"lora_name": "lora-A"})),
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = post_json(&url, &json!({"model": "lora-A", "prompt": "x"})).await;
    assert_eq!(status, 404);
    sim.kill().await;
}

#[tokio::test]
async fn tokenize_with_the_qwen3_tokenizer() {
    let mut c = cfg();
    c.tokenizer = Some(std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/tokenizers/qwen3/tokenizer.json"
    )));
    c.profile.max_model_len = 2048;
    let sim = spawn(c).await.unwrap();
    let (status, body) = post_json(
        &format!("{}/tokenize", sim.base_url()),
        &json!({"model": "tiny-qwen3", "prompt": "Hello, world!"}),
    )
    .await;
    assert_eq!(status, 200);
    let sample: Value =
        serde_json::from_str(include_str!("../fixtures/vllm-0.32-cpu/tokenize.json")).unwrap();
    assert_eq!(body, sample);
    // Chat messages go through the model's chat template (tokenizer_config.json).
    let (status, body) = post_json(
        &format!("{}/tokenize", sim.base_url()),
        &json!({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "Hello"}]}),
    )
    .await;
    assert_eq!(status, 200);
    // <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n
    assert_eq!(
        body["tokens"],
        json!([151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198])
    );
    sim.kill().await;
}

#[tokio::test]
async fn health_and_metrics_families() {
    let sim = spawn(cfg()).await.unwrap();
    let (status, _) = send("GET", &format!("{}/health", sim.base_url()), None).await;
    assert_eq!(status, 200);
    let text = metrics(&sim.base_url()).await;
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
    ] {
        assert_eq!(metric(&text, name), 0.0, "{name}");
    }
    assert!(text.contains("vllm:cache_config_info{"));
    assert!(text.contains("block_size=\"16\""));
    assert!(text.contains("num_gpu_blocks=\"62000\""));
    assert!(text.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"tiny-qwen3\",le=\"0.001\"} 0"));
    sim.kill().await;
}

#[tokio::test]
async fn sglang_mode_uses_sglang_names() {
    let mut c = cfg();
    c.flavor = Flavor::Sglang;
    let sim = spawn(c).await.unwrap();
    let (status, _) = post_json(
        &format!("{}/v1/completions", sim.base_url()),
        &json!({"model": "tiny-qwen3", "prompt": "a b c", "max_tokens": 3}),
    )
    .await;
    assert_eq!(status, 200);
    let text = metrics(&sim.base_url()).await;
    assert_eq!(metric(&text, "sglang:num_running_reqs"), 0.0);
    assert_eq!(metric(&text, "sglang:num_queue_reqs"), 0.0);
    assert_eq!(metric(&text, "sglang:token_usage"), 0.0);
    assert_eq!(
        metric(&text, "sglang:time_to_first_token_seconds_count"),
        1.0
    );
    assert_eq!(
        metric(&text, "sglang:inter_token_latency_seconds_count"),
        2.0
    );
    assert_eq!(metric(&text, "sglang:generation_tokens_total"), 3.0);
    assert!(!text.contains("vllm:"));
    sim.kill().await;
}

#[tokio::test]
async fn fault_injection() {
    let sim = spawn(cfg().with_faults(Faults {
        error_rate: 1.0,
        error_codes: vec![503],
        ..Faults::default()
    }))
    .await
    .unwrap();
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let req = json!({"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": true});
    let (status, body) = post_json(&url, &req).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], 503);
    // Drop after 3 chunks: role chunk + 2 tokens, then the connection is cut.
    sim.set_faults(Faults {
        drop_after_chunks: Some(3),
        ..Faults::default()
    });
    let (status, events, clean) = stream(&url, &req).await;
    assert_eq!(status, 200);
    assert!(!clean);
    assert_eq!(events.len(), 3);
    // First-byte delay (wall time).
    sim.set_faults(Faults {
        first_byte_delay_ms: 150,
        ..Faults::default()
    });
    let t0 = tokio::time::Instant::now();
    let (status, _) = post_json(
        &url.replace("chat/completions", "completions"),
        &json!({"model": "tiny-qwen3", "prompt": "x", "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(t0.elapsed() >= Duration::from_millis(150));
    // A failing metrics endpoint, and back.
    sim.set_faults(Faults {
        metrics_status: Some(500),
        ..Faults::default()
    });
    let metrics_url = format!("{}/metrics", sim.base_url());
    let (status, body) = send("GET", &metrics_url, None).await;
    assert_eq!(
        (status, &body[..]),
        (500, &b"Injected fault: 500 Internal Server Error\n"[..])
    );
    sim.set_faults(Faults::default());
    let (status, body) = send("GET", &metrics_url, None).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("vllm:num_requests_waiting"));
    sim.kill().await;
}

#[tokio::test]
async fn kill_cuts_a_stream_and_closes_the_port() {
    let sims = spawn_many(2, cfg().with_time_scale(1.0)).await.unwrap();
    assert_ne!(sims[0].addr(), sims[1].addr());
    let mut sims = sims.into_iter();
    let victim = sims.next().unwrap();
    let other = sims.next().unwrap();
    let url = format!("{}/v1/completions", victim.base_url());
    let mut reader = tokio::task::JoinSet::new();
    reader.spawn(async move {
        stream(
            &url,
            &json!({"model": "tiny-qwen3", "prompt": "x", "max_tokens": 2000, "stream": true}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let addr = victim.addr();
    victim.kill().await;
    let (status, events, clean) = reader.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(!clean, "stream must be cut, got {} events", events.len());
    assert!(events.len() < 2000);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    // The other engine still serves.
    let (status, _) = post_json(
        &format!("{}/v1/completions", other.base_url()),
        &json!({"model": "tiny-qwen3", "prompt": "x", "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 200);
    other.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_prompt_filling_the_whole_context_leaves_no_room_for_output() {
    let mut c = cfg();
    c.profile.max_model_len = 64;
    let sim = spawn(c).await.unwrap();
    let url = format!("{}/v1/completions", sim.base_url());
    let prompt: Vec<u32> = (1..=64).collect();
    // Without max_tokens, as with it: prompt + output must fit max_model_len (vLLM rejects
    // a prompt of exactly max_model_len tokens).
    for req in [
        json!({"model": "tiny-qwen3", "prompt": prompt}),
        json!({"model": "tiny-qwen3", "prompt": prompt, "stream": true}),
    ] {
        let (status, body) = post_json(&url, &req).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "BadRequestError");
    }
    let url = format!("{}/v1/chat/completions", sim.base_url());
    let long = "a ".repeat(200);
    let (status, _) = post_json(
        &url,
        &json!({"model": "tiny-qwen3", "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(status, 400);
    sim.kill().await;
}

#[tokio::test]
async fn a_lora_adapter_needs_a_name_and_a_path() {
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/load_lora_adapter", sim.base_url());
    for body in [
        json!({"lora_name": "", "lora_path": "/adapters/a"}),
        json!({"lora_name": "a", "lora_path": ""}),
    ] {
        let (status, _) = send("POST", &url, Some(&body)).await;
        assert_eq!(status, 400, "{body}");
    }
    let models = get_json(&format!("{}/v1/models", sim.base_url())).await;
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    sim.kill().await;
}

#[tokio::test]
async fn error_and_tokenize_bodies_keep_the_engine_key_order() {
    let mut c = cfg();
    c.profile.max_model_len = 2048;
    let sim = spawn(c).await.unwrap();
    let prompt: Vec<u32> = (0..2049).collect();
    let (status, body) = send(
        "POST",
        &format!("{}/v1/completions", sim.base_url()),
        Some(&json!({"model": "tiny-qwen3", "prompt": prompt})),
    )
    .await;
    assert_eq!(status, 400);
    let capture = include_str!("../fixtures/vllm-0.32-cpu/error-context-length.json");
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        capture.lines().next().unwrap()
    );
    let (status, body) = send(
        "POST",
        &format!("{}/tokenize", sim.base_url()),
        Some(&json!({"prompt": "Hello, world!"})),
    )
    .await;
    assert_eq!(status, 200);
    let text = std::str::from_utf8(&body).unwrap();
    let order: Vec<usize> = [
        "\"count\"",
        "\"max_model_len\"",
        "\"tokens\"",
        "\"token_strs\"",
    ]
    .iter()
    .map(|k| text.find(k).unwrap())
    .collect();
    assert!(order.is_sorted(), "{text}");
    sim.kill().await;
}

#[tokio::test]
async fn lora_modules_take_vllm_name_equals_path() {
    let mut c = cfg();
    c.lora_modules = vec!["sql=/adapters/sql".to_owned(), "plain".to_owned()];
    let sim = spawn(c).await.unwrap();
    let models = get_json(&format!("{}/v1/models", sim.base_url())).await;
    let ids: Vec<(&str, &str)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["root"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ids,
        [
            ("tiny-qwen3", "tiny-qwen3"),
            ("plain", "plain"),
            ("sql", "/adapters/sql")
        ]
    );
    sim.kill().await;
}

#[tokio::test]
async fn request_ids_differ_between_engines_with_the_same_seed_and_port() {
    let a = spawn(cfg()).await.unwrap();
    let port = a.addr().port();
    let mut c = cfg();
    c.host = "127.0.0.2".parse().unwrap();
    c.port = port;
    let b = spawn(c).await.unwrap();
    let body = json!({"model": "tiny-qwen3", "prompt": [1, 2, 3], "max_tokens": 1});
    let mut ids = Vec::new();
    for sim in [&a, &b] {
        for _ in 0..2 {
            let (status, out) =
                post_json(&format!("{}/v1/completions", sim.base_url()), &body).await;
            assert_eq!(status, 200);
            ids.push(out["id"].as_str().unwrap().to_owned());
        }
    }
    for id in &ids {
        let hex = id.strip_prefix("cmpl-").unwrap();
        assert_eq!(hex.len(), 32, "{id}");
        assert!(
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{id}"
        );
    }
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{ids:?}");
    // The generated text stays deterministic for the seed.
    let (_, x) = post_json(&format!("{}/v1/completions", a.base_url()), &body).await;
    let (_, y) = post_json(&format!("{}/v1/completions", b.base_url()), &body).await;
    assert_eq!(x["choices"][0]["text"], y["choices"][0]["text"]);
    a.kill().await;
    b.kill().await;
}

fn success_line(text: &str, reason: &str) -> Option<String> {
    let prefix = format!(
        "vllm:request_success_total{{engine=\"0\",model_name=\"tiny-qwen3\",finished_reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
}

#[tokio::test]
async fn request_success_has_every_reason_and_counts_client_aborts() {
    let sim = spawn(cfg().with_time_scale(1.0)).await.unwrap();
    let text = metrics(&sim.base_url()).await;
    for reason in ["stop", "length", "abort", "error", "repetition"] {
        assert_eq!(
            success_line(&text, reason).as_deref(),
            Some("0"),
            "{reason}\n{text}"
        );
    }
    let (status, _) = post_json(
        &format!("{}/v1/completions", sim.base_url()),
        &json!({"model": "tiny-qwen3", "prompt": [1, 2, 3], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200);

    // A streaming client reads the first chunk, then goes away.
    let body =
        json!({"model": "tiny-qwen3", "prompt": [4, 5, 6], "max_tokens": 5000, "stream": true})
            .to_string();
    let mut sock = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut sock, req.as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("data: ") {
        let n = tokio::io::AsyncReadExt::read(&mut sock, &mut buf)
            .await
            .unwrap();
        assert!(n > 0, "stream closed early");
        got.extend_from_slice(&buf[..n]);
    }
    drop(sock);

    // The engine notices at its next step; wait for that, then check every series.
    let mut text = String::new();
    for _ in 0..300 {
        text = metrics(&sim.base_url()).await;
        if success_line(&text, "abort").as_deref() == Some("1")
            && metric(&text, "vllm:num_requests_running") == 0.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(metric(&text, "vllm:num_requests_running"), 0.0, "{text}");
    for (reason, n) in [
        ("stop", "0"),
        ("length", "1"),
        ("abort", "1"),
        ("error", "0"),
        ("repetition", "0"),
    ] {
        assert_eq!(
            success_line(&text, reason).as_deref(),
            Some(n),
            "{reason}\n{text}"
        );
    }
    sim.kill().await;
}
