//! Token accounting of rate-limited routes over real sockets (router + kthena-sim): every
//! prompt-bearing member is charged, output budgets are reserved at admission, and a LoRA
//! adapter's requests count against their route's limit.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use crate::common::*;
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

/// Regression: admission checked only that one output token was left, so streams admitted
/// together each spent up to their `max_tokens` of one budget (8 streams of 20 against 50
/// spent 160). Each now reserves its `max_tokens`: 2 of 20 fit in 50, the rest wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_do_not_overshoot_the_output_budget() {
    // Real time: each 20-token stream lasts long enough for all 8 to arrive meanwhile.
    let sim = kthena_sim::spawn(sim_config("m").with_time_scale(1.0))
        .await
        .unwrap();
    let routes = vec![(
        "r.yaml".into(),
        limited_route("m", "{outputTokensPerUnit: 50, unit: hour}"),
    )];
    let r = start(sim.addr(), "m", routes).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let url = format!("{}/v1/completions", r.url());
        let body = serde_json::json!({
            "model": "m", "prompt": "hi", "max_tokens": 20, "stream": true,
            "stream_options": {"include_usage": true},
        })
        .to_string();
        tasks.spawn(async move {
            let (s, h, b) = post(&url, body, &[]).await;
            let retry = h.get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            let text = String::from_utf8_lossy(&b).into_owned();
            let used = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .filter_map(|v| v["usage"]["completion_tokens"].as_u64())
                .next_back()
                .unwrap_or(0);
            (s, retry, used)
        });
    }
    let (mut admitted, mut refused, mut spent) = (0, 0, 0);
    while let Some(t) = tasks.join_next().await {
        let (s, retry, used) = t.unwrap();
        match s {
            StatusCode::OK => {
                admitted += 1;
                spent += used;
            }
            StatusCode::TOO_MANY_REQUESTS => {
                refused += 1;
                // 10 tokens left, 20 needed, 50 per hour: 10 / (50 / 3600) = 720 s.
                assert_eq!(retry.as_deref(), Some("720"));
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((admitted, refused), (2, 6));
    assert!(spent <= 50, "{spent} output tokens of a budget of 50");
    r.router.shutdown().await;
}

/// Regression: a request for the route's own LoRA adapter was not limited (Go keys the
/// limit by the route's model name only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lora_adapters_requests_count_against_the_routes_limit() {
    let mut cfg = sim_config("m");
    cfg.lora_modules = vec!["lora-a".into()];
    let sim = kthena_sim::spawn(cfg).await.unwrap();
    let route = format!(
        "{}  loraAdapters: [lora-a]\n  rateLimit: {{inputTokensPerUnit: 100, unit: hour}}\n",
        simple_route("route-m", "m", "srv")
    );
    let r = start(sim.addr(), "m", vec![("r.yaml".into(), route)]).await;
    let url = r.url();
    let body = |model: &str| {
        serde_json::json!({"model": model, "prompt": "abcd".repeat(40), "max_tokens": 2})
            .to_string()
    };
    // 40 tokens each: the adapter and the base model share 100.
    assert_eq!(
        send(&url, "/v1/completions", body("lora-a")).await,
        (StatusCode::OK, String::new())
    );
    assert_eq!(
        send(&url, "/v1/completions", body("m")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&url, "/v1/completions", body("lora-a")).await,
        (
            StatusCode::TOO_MANY_REQUESTS,
            "input token rate limit exceeded".to_owned()
        )
    );
    let series = r#"kthena_router_rate_limit_exceeded_total{model="lora-a",limit_type="input_tokens",path="/v1/completions"}"#;
    assert_eq!(r.metric(series).await, 1.0);
    r.router.shutdown().await;
}
