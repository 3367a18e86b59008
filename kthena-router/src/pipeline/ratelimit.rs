//! Token rate limits (`crate::ratelimit`): a request for a rate-limited model is admitted by
//! its input and output buckets or answered 429 with `Retry-After`; an admitted request's
//! output reservation is settled through the request's [`Accounting`]: tokens the engine
//! reports beyond it are taken as they are reported, the unused rest is given back when the
//! request settles ([`OutputReservation`]).

use std::sync::Arc;

use http::{Request, Response};
use kthena_openai::estimate_tokens;
use tower::Service;

use super::ctx::{Ctx, Meta, Parsed, Routed};
use super::stage;
use crate::body::RespBody;
use crate::error::Error;
use crate::ratelimit::ModelLimiter;
use crate::shared::Shared;
use tokio_util::task::TaskTracker;

stage!(
    /// Admits requests within their route's token rate limit.
    RateLimitLayer,
    RateLimit,
    Request<Ctx<Routed>> => Request<Ctx<Routed>>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    req: Request<Ctx<Routed>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Routed>>, Response = Response<RespBody>, Error = Error>,
{
    let ctx = req.body();
    admit(&shared, &ctx.meta, &ctx.parsed, req.uri().path()).await?;
    inner.call(req).await
}

/// Admits a request for `path` by its model's token rate limit (when its route has one) and arranges for
/// the answer's output tokens to be charged; the route stage calls it directly for
/// ExternalModelProvider targets, which leave the pipeline before this stage.
///
/// # Errors
/// [`Error::RateLimited`] (429).
pub(super) async fn admit(
    shared: &Shared,
    meta: &Meta,
    parsed: &Parsed,
    path: &str,
) -> Result<(), Error> {
    let model = &parsed.req.model;
    let snap = &parsed.snap;
    let limits = &shared.rate_limits;
    let Some(limiter) = limits.for_model(snap.generation, &snap.route_objects, model) else {
        return Ok(());
    };
    // Go's estimate, as Go routers sharing the Redis count it.
    let tokens = estimate_tokens(&parsed.req.prompt_text);
    let reserved = match limiter.admit(tokens, parsed.req.max_output_tokens).await {
        Ok(r) => r,
        Err(e) => {
            if let Error::RateLimited { kind, .. } | Error::RateLimitTooLarge { kind, .. } = &e {
                shared.metrics.rate_limit.exceeded(model, kind, path);
            }
            return Err(e);
        }
    };
    if limiter.limits_output() {
        let mut r = OutputReservation {
            limiter,
            tasks: shared.rate_limits.charges().clone(),
            reserved,
            used: 0,
        };
        meta.acct.on_output_tokens(Box::new(move |n| r.used(n)));
    }
    Ok(())
}

/// An admitted request's output reservation: tokens reported beyond it are taken as they
/// come; when dropped (the request settled) the unused rest is given back.
struct OutputReservation {
    limiter: Arc<ModelLimiter>,
    tasks: TaskTracker,
    /// Tokens taken at admission.
    reserved: u64,
    /// Output tokens reported so far.
    used: u64,
}

impl OutputReservation {
    /// `more` output tokens were reported.
    fn used(&mut self, more: u64) {
        let over_before = self.used.saturating_sub(self.reserved);
        self.used = self.used.saturating_add(more);
        let over = self.used.saturating_sub(self.reserved) - over_before;
        if over > 0 {
            self.limiter.reconcile_output(over as f64, &self.tasks);
        }
    }
}

impl Drop for OutputReservation {
    fn drop(&mut self) {
        let unused = self.reserved.saturating_sub(self.used);
        if unused > 0 {
            self.limiter.reconcile_output(-(unused as f64), &self.tasks);
        }
    }
}

#[cfg(test)]
mod tests {
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

    async fn request(
        shared: &Arc<Shared>,
        acct: &Accounting,
        prompt: &str,
    ) -> Request<Ctx<Routed>> {
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
}
