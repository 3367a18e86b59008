use std::time::Duration;

use kthena_api::networking::ModelRoute;
use tower::{Layer, ServiceExt};

use super::*;
use crate::pipeline::test_util;
use crate::telemetry::accounting::Accounting;

/// Shared state whose model `m` has `rate_limit` (JSON).
fn limited(rate_limit: &str) -> Arc<Shared> {
    let (shared, _) = test_util::shared(&["127.0.0.1:1"]);
    let route: ModelRoute = serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ModelRoute",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {"modelName": "m", "rules": [{"targetModels": [{"modelServerName": "ms"}]}],
                 "rateLimit": serde_json::from_str::<serde_json::Value>(rate_limit).unwrap()},
    }))
    .unwrap();
    let generation = shared.snapshot.load().generation;
    // The limiters follow this route list until a newer snapshot comes.
    assert!(
        shared
            .rate_limits
            .for_model(generation, &[route], "m")
            .is_some()
    );
    shared
}

async fn request(shared: &Arc<Shared>, acct: &Accounting, prompt: &str) -> Request<Ctx<Routed>> {
    let body = serde_json::json!({"model": "m", "prompt": prompt}).to_string();
    test_util::routed_with(shared, &body, acct.clone()).await
}

#[tokio::test(start_paused = true)]
async fn refuses_past_the_input_limit_until_tokens_refill() {
    let shared = limited(r#"{"inputTokensPerUnit": 4, "unit": "second"}"#);
    let (_, inner) = test_util::recorder::<Ctx<Routed>>();
    let svc = RateLimitLayer::new(Arc::clone(&shared)).layer(inner);
    let acct = test_util::accounting(&shared);
    // 12 characters: 3 tokens of 4.
    svc.clone()
        .oneshot(request(&shared, &acct, "abcdefghijkl").await)
        .await
        .unwrap();
    let e = svc
        .clone()
        .oneshot(request(&shared, &acct, "abcdefgh").await)
        .await
        .unwrap_err();
    assert_eq!(
        (e.status().as_u16(), e.code()),
        (429, "rate_limit_exceeded")
    );
    assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    tokio::time::advance(Duration::from_millis(250)).await;
    svc.oneshot(request(&shared, &acct, "abcdefgh").await)
        .await
        .unwrap();
    let text = shared.metrics.encode();
    let series = r#"kthena_router_rate_limit_exceeded_total{model="m",limit_type="input_tokens",path="/v1/completions"} 1"#;
    assert!(text.contains(series), "{text}");
}

#[tokio::test(start_paused = true)]
async fn charges_the_answers_output_tokens() {
    let shared = limited(r#"{"outputTokensPerUnit": 10, "unit": "minute"}"#);
    let (_, inner) = test_util::recorder::<Ctx<Routed>>();
    let svc = RateLimitLayer::new(Arc::clone(&shared)).layer(inner);
    let first = test_util::accounting(&shared);
    svc.clone()
        .oneshot(request(&shared, &first, "hi").await)
        .await
        .unwrap();
    // No max_tokens: the whole limit of 10 is reserved; the answer ends with 12
    // completion tokens: 2 in debt.
    first.finish(200, None, "", 12);
    let e = svc
        .oneshot(request(&shared, &test_util::accounting(&shared), "hi").await)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "output token rate limit exceeded");
    // The debt of 2 and a reservation of 10 at 10 per minute.
    assert_eq!(e.retry_after(), Some(Duration::from_secs(72)));
}

async fn with_max_tokens(
    shared: &Arc<Shared>,
    acct: &Accounting,
    max_tokens: u64,
) -> Request<Ctx<Routed>> {
    let body = serde_json::json!({"model": "m", "prompt": "hi", "max_tokens": max_tokens});
    test_util::routed_with(shared, &body.to_string(), acct.clone()).await
}

#[tokio::test(start_paused = true)]
async fn a_request_that_fails_gives_its_whole_reservation_back() {
    let shared = limited(r#"{"outputTokensPerUnit": 10, "unit": "hour"}"#);
    let (_, inner) = test_util::recorder::<Ctx<Routed>>();
    let svc = RateLimitLayer::new(Arc::clone(&shared)).layer(inner);
    let first = test_util::accounting(&shared);
    svc.clone()
        .oneshot(with_max_tokens(&shared, &first, 8).await)
        .await
        .unwrap();
    // 2 left: a request for 3 is refused.
    let other = test_util::accounting(&shared);
    let e = svc
        .clone()
        .oneshot(with_max_tokens(&shared, &other, 3).await)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "output token rate limit exceeded");
    // The first request fails before any answer: all 8 come back when it settles.
    first.failed(&Error::QueueClientDisconnected);
    first.settle();
    let third = test_util::accounting(&shared);
    svc.oneshot(with_max_tokens(&shared, &third, 10).await)
        .await
        .unwrap();
}
