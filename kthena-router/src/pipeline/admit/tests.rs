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
