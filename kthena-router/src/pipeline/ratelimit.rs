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
mod tests;
