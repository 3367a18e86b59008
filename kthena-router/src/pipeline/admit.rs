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
mod tests {
    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::pipeline::test_util;
    use crate::telemetry::accounting::Accounting;
    use crate::upstream::overload::OverloadConfig;

    #[tokio::test]
    async fn sheds_past_the_router_cap_until_a_slot_comes_back() {
        let cfg = OverloadConfig {
            max_in_flight: 2,
            ..OverloadConfig::default()
        };
        let (shared, _) = test_util::shared_with(&["127.0.0.1:1"], cfg);
        let (_, inner) = test_util::recorder::<Ctx<Routed>>();
        let svc = AdmitLayer::new(Arc::clone(&shared)).layer(inner);
        let accts: Vec<Accounting> = (0..2).map(|_| test_util::accounting(&shared)).collect();
        for a in &accts {
            let req = test_util::routed(&shared, a.clone()).await;
            svc.clone().oneshot(req).await.unwrap();
        }
        let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        let e = svc.clone().oneshot(req).await.unwrap_err();
        assert_eq!(e.status(), 503);
        assert_eq!(e.code(), "server_overloaded");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
        // A settled request gives its slot back.
        accts[0].finish(200, None, "", 0);
        accts[0].settle();
        let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        svc.oneshot(req).await.unwrap();
        let text = shared.metrics.encode();
        assert!(
            text.contains("kthena_router_overload_rejected_total{reason=\"router_limit\"} 1"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_capped_and_open_endpoints_out_of_the_pool() {
        let cfg = OverloadConfig {
            max_in_flight_per_endpoint: 1,
            breaker_failures: 1,
            breaker_cool_down: Duration::from_millis(2_500),
            ..OverloadConfig::default()
        };
        let (shared, eps) = test_util::shared_with(&["127.0.0.1:1", "127.0.0.1:2"], cfg);
        let (seen, inner) = test_util::recorder::<Ctx<Routed>>();
        let svc = AdmitLayer::new(Arc::clone(&shared)).layer(inner);
        let busy = eps[0].begin_request(0);
        let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        svc.clone().oneshot(req).await.unwrap();
        let pool = seen.lock().unwrap().take().unwrap().at.pool;
        assert_eq!(pool.len(), 1);
        assert_eq!(pool[0].name, eps[1].name);
        // The other one's breaker opens: nothing is left.
        eps[1]
            .breaker()
            .record(false, Instant::now(), 1, Duration::from_millis(2_500));
        let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        let e = svc.clone().oneshot(req).await.unwrap_err();
        assert_eq!(e.code(), "circuit_open");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        drop(busy);
        let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        svc.clone().oneshot(req).await.unwrap();
        let pool = seen.lock().unwrap().take().unwrap().at.pool;
        assert_eq!(pool.len(), 1);
        assert_eq!(pool[0].name, eps[0].name);
        // Both at the cap.
        let _a = eps[0].begin_request(0);
        tokio::time::advance(Duration::from_secs(3)).await;
        let _b = eps[1].begin_request(0);
        let req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        let e = svc.oneshot(req).await.unwrap_err();
        assert_eq!(e.code(), "server_overloaded");
        assert!(
            e.to_string().contains("every endpoint of default/ms"),
            "{e}"
        );
    }
}
