//! Token accounting of rate-limited routes over real sockets (router + kthena-sim): every
//! prompt-bearing member is charged, output budgets are reserved at admission, and a LoRA
//! adapter's requests count against their route's limit.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

mod common;

use common::*;
use http::StatusCode;

fn limited_route(model: &str, rate_limit: &str) -> String {
    format!(
        "{}  rateLimit: {rate_limit}\n",
        simple_route(&format!("route-{model}"), model, "srv")
    )
}

async fn start(
    sim: std::net::SocketAddr,
    model: &str,
    routes: Vec<(String, String)>,
) -> TestRouter {
    let mut manifests: Vec<(&str, String)> =
        vec![("s.yaml", model_server("srv", model, "demo", ""))];
    for (name, text) in &routes {
        manifests.push((name.as_str(), text.clone()));
    }
    let r = TestRouter::start(
        "metricsScrapeInterval: 100ms",
        &endpoint("sim-a", sim, "demo"),
        &manifests,
    )
    .await;
    r.wait_ready().await;
    r
}

/// `(status, error.message or "")` of a `POST path`.
async fn send(url: &str, path: &str, body: String) -> (StatusCode, String) {
    let (s, _, b) = post(&format!("{url}{path}"), body, &[]).await;
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
    (s, v["error"]["message"].as_str().unwrap_or("").to_owned())
}

/// Regression: the estimate read `prompt` first, so a chat request with an empty `prompt`
/// (or `prompt: []`) beside its `messages` was charged 0 tokens and forwarded whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_with_an_empty_prompt_is_charged_its_messages() {
    let sim = kthena_sim::spawn(sim_config("m")).await.unwrap();
    let routes = vec![(
        "r.yaml".into(),
        limited_route("m", "{inputTokensPerUnit: 100, unit: hour}"),
    )];
    let r = start(sim.addr(), "m", routes).await;
    let url = r.url();
    // "<|im_start|>user\n" (17) + 160 + "<|im_end|>\n" (11) = 188 characters: 47 tokens.
    let text = "abcd".repeat(40);
    let messages = serde_json::json!([{"role": "user", "content": text}]);
    let bodies = [
        serde_json::json!({"model": "m", "prompt": "", "messages": messages, "max_tokens": 2}),
        serde_json::json!({"model": "m", "prompt": [], "messages": messages, "max_tokens": 2}),
    ];
    // 47 + 47 = 94 of 100; the third does not fit.
    for b in &bodies {
        let (s, msg) = send(&url, "/v1/chat/completions", b.to_string()).await;
        assert_eq!((s, msg.as_str()), (StatusCode::OK, ""));
    }
    let (s, msg) = send(&url, "/v1/chat/completions", bodies[0].to_string()).await;
    assert_eq!(
        (s, msg.as_str()),
        (
            StatusCode::TOO_MANY_REQUESTS,
            "input token rate limit exceeded"
        )
    );
    // 6 tokens left: a completion of 24 characters fits, one more token does not.
    let small = |n: usize| {
        serde_json::json!({"model": "m", "prompt": "a".repeat(n), "max_tokens": 2}).to_string()
    };
    assert_eq!(
        send(&url, "/v1/completions", small(28)).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&url, "/v1/completions", small(24)).await.0,
        StatusCode::OK
    );
    let charged: Vec<u64> = r
        .access_log()
        .iter()
        .map(|l| l["input_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(charged, [47, 47, 47, 7, 6]);
    r.router.shutdown().await;
}
