//! Prefill/decode disaggregation: the NIXL-style `kv_transfer_params` handshake and the SGLang
//! bootstrap flow, as the router drives them (Go Kthena
//! `pkg/kthena-router/connectors/*`).
#![allow(clippy::unwrap_used, reason = "tests")]

use crate::common::{metric, metrics, post_json, send};
use kthena_sim::{Config, Flavor, Role, spawn};
use serde_json::{Value, json};

fn cfg(flavor: Flavor, role: Role) -> Config {
    let mut c = Config::default()
        .with_ephemeral_port()
        .with_model("m")
        .with_time_scale(20.0);
    c.flavor = flavor;
    c.role = role;
    c
}

#[tokio::test]
async fn nixl_style_prefill_then_decode() {
    let prefill = spawn(cfg(Flavor::Vllm, Role::Prefill)).await.unwrap();
    let decode = spawn(cfg(Flavor::Vllm, Role::Decode)).await.unwrap();
    let prompt: Vec<u32> = (0..4096).collect();

    // What the router sends to the prefill engine.
    let (status, pre) = post_json(
        &format!("{}/v1/completions", prefill.base_url()),
        &json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}}),
    )
    .await;
    assert_eq!(status, 200);
    let params = pre["kv_transfer_params"].clone();
    assert_eq!(params["do_remote_prefill"], true);
    assert_eq!(params["do_remote_decode"], false);
    // Physical block indices of the prefill engine's KV cache (vLLM reserves block 0 as its
    // null block, so a fresh engine hands out 1, 2, ...), not 64-bit block hashes.
    let ids: Vec<u64> = params["remote_block_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(ids, (1..=256).collect::<Vec<u64>>());
    assert_eq!(params["remote_host"], "127.0.0.1");
    assert_eq!(params["remote_port"], prefill.addr().port());
    assert!(
        params["remote_engine_id"]
            .as_str()
            .unwrap()
            .starts_with("kthena-sim-")
    );
    let prefill_ttft = metric(
        &metrics(&prefill.base_url()).await,
        "vllm:time_to_first_token_seconds_sum",
    );
    assert!((prefill_ttft - (0.005 + 4096.0 * 0.00003)).abs() < 1e-9);

    // The decode engine gets the original request plus the prefill's kv_transfer_params.
    let (status, dec) = post_json(
        &format!("{}/v1/completions", decode.base_url()),
        &json!({"model": "m", "prompt": prompt, "max_tokens": 8, "kv_transfer_params": params}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(dec["usage"]["completion_tokens"], 8);
    assert_eq!(dec["kv_transfer_params"], Value::Null);
    // Decode TTFT = transfer (2 ms + 4095 x 0.00115 ms) + one 1-token step (5 ms + 0.03 ms):
    // far below a local prefill.
    let text = metrics(&decode.base_url()).await;
    let ttft = metric(&text, "vllm:time_to_first_token_seconds_sum");
    let expected = (2.0 + 4095.0 * 0.00115 + 5.0 + 0.03) / 1e3;
    assert!(
        (ttft - expected).abs() < 1e-9,
        "decode TTFT {ttft} vs {expected}"
    );
    assert!(ttft * 10.0 < prefill_ttft);
    prefill.kill().await;
    decode.kill().await;
}

#[tokio::test]
async fn sglang_bootstrap_pairs_concurrent_requests() {
    let prefill = spawn(cfg(Flavor::Sglang, Role::Prefill)).await.unwrap();
    let decode = spawn(cfg(Flavor::Sglang, Role::Decode)).await.unwrap();
    let room = 4_242_u64;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 4});

    // Decode first: it must wait for the prefill of the same room.
    let mut dec_body = body.clone();
    dec_body["bootstrap_room"] = json!(room);
    dec_body["bootstrap_host"] = json!(prefill.addr().to_string());
    let dec_url = format!("{}/v1/chat/completions", decode.base_url());
    let mut dec = tokio::task::JoinSet::new();
    dec.spawn(async move { post_json(&dec_url, &dec_body).await });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        dec.try_join_next().is_none(),
        "decode must wait for the prefill"
    );

    let mut pre_body = body.clone();
    pre_body["bootstrap_room"] = json!(room);
    pre_body["max_tokens"] = json!(1);
    let (status, _) = post_json(
        &format!("{}/v1/chat/completions", prefill.base_url()),
        &pre_body,
    )
    .await;
    assert_eq!(status, 200);
    let (status, out) = dec.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert_eq!(out["usage"]["completion_tokens"], 4);

    // A decode request without bootstrap_host is rejected.
    let mut bad = body.clone();
    bad["bootstrap_room"] = json!(1);
    let (status, err) =
        post_json(&format!("{}/v1/chat/completions", decode.base_url()), &bad).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["param"], "bootstrap_host");
    prefill.kill().await;
    decode.kill().await;
}

#[tokio::test]
async fn kv_transfer_params_keep_vllm_key_order() {
    let prefill = spawn(cfg(Flavor::Vllm, Role::Prefill)).await.unwrap();
    let prompt: Vec<u32> = (0..40).collect();
    let (status, body) = send(
        "POST",
        &format!("{}/v1/completions", prefill.base_url()),
        Some(&json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                     "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}})),
    )
    .await;
    assert_eq!(status, 200);
    let text = std::str::from_utf8(&body).unwrap();
    let start = text.find("\"kv_transfer_params\":").unwrap();
    let want = format!(
        "\"kv_transfer_params\":{{\"do_remote_prefill\":true,\"do_remote_decode\":false,\"remote_block_ids\":[1,2],\"remote_engine_id\":\"kthena-sim-{addr}\",\"remote_host\":\"127.0.0.1\",\"remote_port\":{port},\"tp_size\":1}}",
        addr = prefill.addr(),
        port = prefill.addr().port(),
    );
    assert_eq!(&text[start..start + want.len()], want, "{text}");
    // A second request with the same prompt reuses the cached blocks.
    let (_, again) = post_json(
        &format!("{}/v1/completions", prefill.base_url()),
        &json!({"model": "m", "prompt": prompt, "max_tokens": 1,
                "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}}),
    )
    .await;
    assert_eq!(
        again["kv_transfer_params"]["remote_block_ids"],
        json!([1, 2])
    );
    prefill.kill().await;
}
