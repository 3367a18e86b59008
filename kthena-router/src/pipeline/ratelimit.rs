//! Token rate limits (`crate::ratelimit`): a request for a rate-limited model is admitted by
//! its input and output buckets or answered 429 with `Retry-After`; an admitted request's
//! output tokens are charged when the engine's answer (its `usage`) ends, through the
//! request's [`Accounting`].

use std::sync::Arc;

use http::{Request, Response};
use tower::Service;

use super::{Parsed, ext, stage};
use crate::accounting::Accounting;
use crate::error::Error;
use crate::openai::estimate_tokens;
use crate::proxy::RespBody;
use crate::service::Shared;

stage!(
    /// Admits requests within their route's token rate limit.
    RateLimitLayer,
    RateLimit,
    Request<()>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    req: Request<()>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<()>, Response = Response<RespBody>, Error = Error>,
{
    let parsed = ext::<Parsed>(&req, "parsed request")?;
    let model = &parsed.req.model;
    let snap = &parsed.snap;
    let limits = &shared.rate_limits;
    if let Some(limiter) = limits.for_model(snap.generation, &snap.route_objects, model) {
        // Go's estimate, as Go routers sharing the Redis count it.
        let tokens = estimate_tokens(&parsed.req.prompt_text);
        if let Err(e) = limiter.admit(tokens).await {
            if let Error::RateLimited { kind, .. } = &e {
                shared
                    .metrics
                    .rate_limit
                    .exceeded(model, kind, req.uri().path());
            }
            return Err(e);
        }
        if limiter.limits_output()
            && let Some(acct) = req.extensions().get::<Accounting>()
        {
            let tasks = shared.rate_limits.charges().clone();
            acct.on_output_tokens(Box::new(move |n| limiter.charge_output(n, &tasks)));
        }
    }
    inner.call(req).await
}
