use super::*;

#[tokio::test(start_paused = true)]
async fn breaker_opens_after_threshold_and_recovers_through_one_probe() {
    let b = Breaker::default();
    let cool = Duration::from_secs(10);
    let now = Instant::now;
    for _ in 0..2 {
        assert_eq!(b.record(false, now(), 3, cool), None);
    }
    assert_eq!(b.try_pass(now(), cool), Some(BreakerState::Closed));
    assert_eq!(b.record(false, now(), 3, cool), Some(BreakerState::Open));
    assert_eq!(b.state(now()), BreakerState::Open);
    assert!(!b.available(now()));
    assert_eq!(b.try_pass(now(), cool), None);
    assert_eq!(b.remaining(now()), cool);

    tokio::time::advance(Duration::from_millis(9_999)).await;
    assert_eq!(b.try_pass(now(), cool), None);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(b.available(now()));
    assert_eq!(b.try_pass(now(), cool), Some(BreakerState::HalfOpen));
    assert_eq!(b.state(now()), BreakerState::HalfOpen);
    assert!(!b.available(now()));
    assert_eq!(b.try_pass(now(), cool), None, "only one probe");
    // The probe fails: open for another cool-down.
    assert_eq!(b.record(false, now(), 3, cool), Some(BreakerState::Open));
    tokio::time::advance(cool).await;
    // A probe that never reports holds the endpoint for one more cool-down only.
    assert_eq!(b.try_pass(now(), cool), Some(BreakerState::HalfOpen));
    tokio::time::advance(cool).await;
    assert_eq!(b.try_pass(now(), cool), Some(BreakerState::HalfOpen));
    assert_eq!(b.record(true, now(), 3, cool), Some(BreakerState::Closed));
    assert_eq!(b.state(now()), BreakerState::Closed);
    // A success resets the count: two more failures do not open it again.
    b.record(false, now(), 3, cool);
    b.record(false, now(), 3, cool);
    assert_eq!(b.record(true, now(), 3, cool), None);
    assert_eq!(b.record(false, now(), 3, cool), None);
}

#[test]
fn disabled_breaker_never_opens() {
    let b = Breaker::default();
    for _ in 0..100 {
        assert_eq!(b.record(false, Instant::now(), 0, Duration::ZERO), None);
    }
    assert!(b.available(Instant::now()));
}
