use super::*;

fn route(name: &str, model: &str, rate_limit: Option<&str>) -> ModelRoute {
    let mut v = serde_json::json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ModelRoute",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"modelName": model, "rules": [{"targetModels": [{"modelServerName": "s"}]}]},
    });
    if let Some(rl) = rate_limit {
        v["spec"]["rateLimit"] = serde_json::from_str(rl).unwrap();
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test(start_paused = true)]
async fn buckets_follow_the_routes_across_reloads() {
    let limits = RateLimits::default();
    let rl = r#"{"inputTokensPerUnit": 10, "unit": "hour"}"#;
    let routes = vec![
        route("old", "m", Some(rl)),
        route("new", "m", Some(r#"{"inputTokensPerUnit": 99}"#)),
        route("free", "f", None),
    ];
    let m = limits.for_model(1, &routes, "m").unwrap();
    assert!(limits.for_model(1, &routes, "f").is_none());
    // The oldest route's limit applies.
    m.admit(10, None).await.unwrap();
    let e = m.admit(1, None).await.unwrap_err();
    assert_eq!(e.to_string(), "input token rate limit exceeded");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(360)));
    // A reload with the same limit keeps the spent bucket; an older generation changes
    // nothing.
    let again = limits.for_model(2, &routes, "m").unwrap();
    assert!(Arc::ptr_eq(&m, &again));
    assert!(
        limits
            .for_model(1, &routes[1..], "m")
            .is_some_and(|l| Arc::ptr_eq(&l, &m))
    );
    // A changed limit starts full, a removed one is gone.
    let changed = vec![route(
        "old",
        "m",
        Some(r#"{"inputTokensPerUnit": 20, "unit": "hour"}"#),
    )];
    limits
        .for_model(3, &changed, "m")
        .unwrap()
        .admit(20, None)
        .await
        .unwrap();
    assert!(
        limits
            .for_model(4, &[route("old", "m", None)], "m")
            .is_none()
    );
}

/// Regression: a prompt larger than the input limit's whole unit got 429 with a
/// `Retry-After` (1 s on a full bucket, nearly an hour on an empty one) although it could
/// never be admitted, so clients waited and retried for ever. It now gets 429 saying so,
/// without `Retry-After`, full bucket or not, and takes nothing from the bucket.
#[tokio::test(start_paused = true)]
async fn a_request_larger_than_the_whole_limit_gets_no_retry_after() {
    let limits = RateLimits::default();
    let rl = r#"{"inputTokensPerUnit": 100, "unit": "hour"}"#;
    let m = limits
        .for_model(1, &[route("r", "m", Some(rl))], "m")
        .unwrap();
    for _ in 0..2 {
        let e = m.admit(1006, None).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "input token rate limit exceeded: the request needs 1006 input tokens, more than the limit of 100 per hour; it can never be admitted"
        );
        assert_eq!(e.retry_after(), None);
        assert_eq!(e.status(), http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.code(), "rate_limit_exceeded");
    }
    assert_eq!(m.admit(100, None).await.unwrap(), 0);
    let e = m.admit(1, None).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(36)));
}

/// Regression: the debt of an output charge larger than one unit's limit was
/// answered with a `Retry-After` of at most one unit, and a request was admitted with
/// a single output token left.
#[tokio::test(start_paused = true)]
async fn output_debt_blocks_until_refilled_and_refunds_input() {
    let limits = RateLimits::default();
    let rl = r#"{"inputTokensPerUnit": 100, "outputTokensPerUnit": 10, "unit": "second"}"#;
    let m = limits
        .for_model(1, &[route("r", "m", Some(rl))], "m")
        .unwrap();
    // 4 output tokens reserved, 30 produced: 26 more taken, 20 tokens of debt.
    assert_eq!(m.admit(5, Some(4)).await.unwrap(), 4);
    m.reconcile_output(26.0, limits.charges());
    // At 10 per second the debt and 1 token are there after 2.1 s: Retry-After 3; the
    // refused request's 5 input tokens come back.
    let e = m.admit(5, Some(1)).await.unwrap_err();
    assert_eq!(e.to_string(), "output token rate limit exceeded");
    assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
    tokio::time::advance(Duration::from_millis(2_000)).await;
    let e = m.admit(5, Some(1)).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(m.admit(90, Some(1)).await.unwrap(), 1);
}

/// Regression: admission checked that one output token was left, so every request
/// admitted before the first answer ended could spend the whole budget again.
#[tokio::test(start_paused = true)]
async fn output_reservations_bound_what_concurrent_requests_may_spend() {
    let limits = RateLimits::default();
    let rl = r#"{"outputTokensPerUnit": 60, "unit": "minute"}"#;
    let m = limits
        .for_model(1, &[route("r", "m", Some(rl))], "m")
        .unwrap();
    // Three of 20 fit in 60; the fourth waits 20 s for 20 tokens at 1 per second.
    for _ in 0..3 {
        assert_eq!(m.admit(0, Some(20)).await.unwrap(), 20);
    }
    let e = m.admit(0, Some(20)).await.unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_secs(20)));
    // One answer used 5 of its 20: 15 back at once.
    m.reconcile_output(-15.0, limits.charges());
    assert_eq!(m.admit(0, Some(15)).await.unwrap(), 15);
    // No max_tokens: the default reservation, at most the whole limit.
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(m.admit(0, None).await.unwrap(), 60);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(m.admit(0, Some(0)).await.unwrap(), 1);
}

/// Regression: a request for one of the route's LoRA adapters was not limited.
#[tokio::test(start_paused = true)]
async fn a_routes_lora_adapters_share_its_limit() {
    let limits = RateLimits::default();
    let mut r = route(
        "r",
        "base",
        Some(r#"{"inputTokensPerUnit": 10, "unit": "hour"}"#),
    );
    r.spec.lora_adapters = vec!["lora-a".into(), "own".into()];
    let routes = vec![r, route("own-route", "own", None)];
    let base = limits.for_model(1, &routes, "base").unwrap();
    let adapter = limits.for_model(1, &routes, "lora-a").unwrap();
    assert!(Arc::ptr_eq(&base, &adapter));
    // `own` is a model name of its own route (which matches first): not limited here.
    assert!(limits.for_model(1, &routes, "own").is_none());
}

#[test]
fn retry_after_is_whole_seconds_until_the_bucket_holds_the_need() {
    // 100 per minute: 1.67 tokens/s; 10 missing → 6 s.
    assert_eq!(retry_after(10.0, 0.0, 100.0 / 60.0), Duration::from_secs(6));
    assert_eq!(retry_after(1.0, 0.99, 1.0), Duration::from_secs(1));
    // A debt of 30 and 1 token at 0.5/s: 62 s, beyond one unit when the unit is shorter.
    assert_eq!(retry_after(1.0, -30.0, 0.5), Duration::from_secs(62));
    assert_eq!(retry_after(1.0, -30.0, 10.0), Duration::from_secs(4));
}
