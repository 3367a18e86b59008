use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn refills_at_limit_per_unit_up_to_capacity() {
    let mut b = LocalBucket::new(120, 60, Instant::now());
    assert_eq!(b.allow_n(Instant::now(), 100.0), (true, 20.0));
    assert_eq!(b.allow_n(Instant::now(), 21.0), (false, 20.0));
    tokio::time::advance(Duration::from_millis(500)).await;
    // 2 tokens per second.
    assert_eq!(b.allow_n(Instant::now(), 21.0), (true, 0.0));
    assert_eq!(b.reconcile_n(Instant::now(), 30.0), -30.0);
    assert_eq!(b.allow_n(Instant::now(), 1.0), (false, -30.0));
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(b.tokens(Instant::now()), 120.0);
    assert_eq!(b.reconcile_n(Instant::now(), -50.0), 120.0);
}
