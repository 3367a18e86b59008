//! Admit: overload protection before any upstream work. A request past
//! `overload.maxInFlight` gets 503 with `Retry-After` at once; the route's endpoints are
//! narrowed to those under `overload.maxInFlightPerEndpoint` whose circuit breaker lets
//! requests through (503 when none is left). The admission slot is held by the request's
//! [`Accounting`](crate::telemetry::accounting::Accounting) until the response body ends.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use tokio::time::Instant;
use tower::Service;

use super::ctx::{Ctx, Routed};
use super::stage;
use crate::body::RespBody;
use crate::error::Error;
use crate::shared::Shared;

stage!(
    /// Sheds load past the in-flight caps and keeps open breakers out of the pool.
    AdmitLayer,
    Admit,
    Request<Ctx<Routed>> => Request<Ctx<Routed>>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    mut req: Request<Ctx<Routed>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Routed>>, Response = Response<RespBody>, Error = Error>,
{
    let cfg = &shared.overload;
    if let Some(sem) = &shared.admission {
        let Ok(permit) = Arc::clone(sem).try_acquire_owned() else {
            shared.metrics.overload.rejected("router_limit");
            return Err(Error::Overloaded {
                scope: "the router".into(),
                limit: cfg.max_in_flight,
                retry_after: whole_secs(cfg.retry_after),
            });
        };
        req.body().meta.acct.admitted(permit);
    }
    let routed = &mut req.body_mut().at;
    routed.pool = Arc::new(admit_endpoints(&shared, routed)?);
    inner.call(req).await
}

/// The endpoints of the pool under the per-endpoint cap whose breaker is not open.
pub(super) fn admit_endpoints(
    shared: &Shared,
    routed: &Routed,
) -> Result<Vec<Arc<crate::upstream::endpoint::Endpoint>>, Error> {
    let cfg = &shared.overload;
    let cap = cfg.max_in_flight_per_endpoint;
    let under_cap: Vec<_> = routed
        .pool
        .iter()
        .filter(|e| cap == 0 || e.in_flight() < cap)
        .collect();
    if under_cap.is_empty() {
        shared.metrics.overload.rejected("endpoint_limit");
        return Err(Error::Overloaded {
            scope: format!("every endpoint of {}", routed.server.key),
            limit: cap as usize,
            retry_after: whole_secs(cfg.retry_after),
        });
    }
    let now = Instant::now();
    let passing: Vec<_> = under_cap
        .iter()
        .filter(|e| e.breaker().available(now))
        .map(|e| Arc::clone(e))
        .collect();
    if passing.is_empty() {
        shared.metrics.overload.rejected("circuit_open");
        let soonest = under_cap
            .iter()
            .map(|e| e.breaker().remaining(now))
            .min()
            .unwrap_or(cfg.breaker_cool_down);
        return Err(Error::CircuitOpen {
            server: routed.server.key.clone(),
            retry_after: whole_secs(soonest),
        });
    }
    Ok(passing)
}

/// `d` rounded up to whole seconds, at least 1 s (`Retry-After` counts seconds).
fn whole_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests;
