//! `/v1/responses` over real sockets (non-streaming object, the streaming event sequence)
//! and the request body limit (413 in vLLM's error shape, at least kthena-router's limit).
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::common::{cfg, client, post_json, send};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kthena_sim::{Config, spawn};
use serde_json::{Value, json};

#[tokio::test]
async fn responses_non_streaming_object() {
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/responses", sim.base_url());
    let (status, body) = post_json(
        &url,
        &json!({"model": "tiny-qwen3", "input": "Hello there", "instructions": "Be brief.", "max_output_tokens": 4}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "response");
    assert!(body["id"].as_str().unwrap().starts_with("resp_"), "{body}");
    assert_eq!(body["model"], "tiny-qwen3");
    assert_eq!(body["instructions"], "Be brief.");
    assert_eq!(body["max_output_tokens"], 4);
    // The simulator always runs to the budget: vLLM reports a `length` finish this way.
    assert_eq!(body["status"], "incomplete");
    assert_eq!(
        body["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    let out = &body["output"];
    assert_eq!(out.as_array().unwrap().len(), 1);
    assert_eq!(out[0]["type"], "message");
    assert_eq!(out[0]["role"], "assistant");
    assert_eq!(out[0]["status"], "completed");
    assert!(out[0]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(out[0]["content"][0]["type"], "output_text");
    assert!(!out[0]["content"][0]["text"].as_str().unwrap().is_empty());
    let u = &body["usage"];
    assert_eq!(u["output_tokens"], 4);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + 4
    );
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);

    // A list of message items (the Responses `input_text` parts), same answer shape.
    let (status, body) = post_json(
        &url,
        &json!({"model": "tiny-qwen3", "max_output_tokens": 2, "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "function_call_output", "call_id": "c1", "output": "ignored"}
        ]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["output_tokens"], 2);

    // Unknown model and empty input: vLLM's error shape.
    let (status, body) = post_json(&url, &json!({"model": "nope", "input": "x"})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "NotFoundError");
    let (status, body) = post_json(&url, &json!({"model": "tiny-qwen3", "input": []})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "input");
    sim.kill().await;
}

#[tokio::test]
async fn responses_stream_sends_named_events_in_order() {
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/responses", sim.base_url());
    let req = http::Request::post(&url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            json!({"model": "tiny-qwen3", "input": "Hi", "max_output_tokens": 3, "stream": true})
                .to_string(),
        )))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (ev, data) = e.split_once('\n').unwrap();
            let kind = ev.strip_prefix("event: ").unwrap().to_owned();
            let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(v["type"], kind.as_str());
            (kind, v)
        })
        .collect();
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (_, v)) in events.iter().enumerate() {
        assert_eq!(v["sequence_number"], i);
    }
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    let deltas: String = events[4..7]
        .iter()
        .map(|(_, v)| v["delta"].as_str().unwrap())
        .collect();
    assert_eq!(events[7].1["text"], deltas.as_str());
    let done = &events[10].1["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], deltas.as_str());
    assert_eq!(done["usage"]["output_tokens"], 3);
    assert_eq!(done["id"], events[0].1["response"]["id"]);
    sim.kill().await;
}

/// Bodies up to `--max-body-bytes` (default 64 MiB, above kthena-router's 10 MiB) are read;
/// larger ones get 413 in vLLM's error shape, on every endpoint.
#[tokio::test]
async fn body_limit_is_above_the_routers_and_answers_in_the_engine_shape() {
    assert!(Config::default().max_body_bytes >= 10 * 1024 * 1024);
    let sim = spawn(cfg()).await.unwrap();
    let url = format!("{}/v1/completions", sim.base_url());
    // An 11 MiB body (over the router's default limit) is read and judged on its content.
    let big =
        json!({"model": "tiny-qwen3", "prompt": "x ".repeat(11 * 512 * 1024), "max_tokens": 1});
    let (status, body) = send("POST", &url, Some(&big)).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "input_tokens");
    sim.kill().await;

    let mut small = cfg();
    small.max_body_bytes = 1000;
    let sim = spawn(small).await.unwrap();
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/tokenize",
    ] {
        let body = json!({"model": "tiny-qwen3", "prompt": "y".repeat(2000)});
        let (status, bytes) = send("POST", &format!("{}{path}", sim.base_url()), Some(&body)).await;
        assert_eq!(status, 413, "{path}");
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"error":{"message":"Request body is larger than the server's limit.","type":"Request Entity Too Large","param":null,"code":413}}"#,
            "{path}"
        );
    }
    sim.kill().await;
}
