use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

fn queue(per_pod: usize, grace: Duration, busy: Arc<AtomicBool>) -> Arc<SessionQueue> {
    let cfg = SessionBoostConfig {
        inflight_per_pod: per_pod,
        grace_period: grace,
        ..SessionBoostConfig::default()
    };
    let capacity: Capacity = Arc::new(move |_: &str| (1, !busy.load(Ordering::SeqCst)));
    SessionQueue::new("m".into(), cfg, capacity, QueueMetrics::default())
}

fn spawn_wait(
    q: &Arc<SessionQueue>,
    session: &str,
    order: &Arc<Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<()> {
    let (q, order, s) = (Arc::clone(q), Arc::clone(order), session.to_owned());
    #[allow(clippy::disallowed_methods, reason = "test tasks, joined by the test")]
    tokio::spawn(async move {
        let slot = q.wait(Some(s.as_str().into()), None).await.unwrap();
        order.lock().unwrap().push(s);
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(slot);
    })
}

#[tokio::test(start_paused = true)]
async fn follow_ups_of_completed_sessions_overtake_first_turns() {
    let q = queue(1, Duration::ZERO, Arc::new(AtomicBool::new(false)));
    q.completed(&"old".into());
    tokio::time::advance(Duration::from_secs(1)).await;
    q.completed(&"recent".into());
    let order = Arc::new(Mutex::new(Vec::new()));
    let held = q.wait(None, None).await.unwrap();
    let mut hs = Vec::new();
    for s in ["new-1", "old", "new-2", "recent"] {
        hs.push(spawn_wait(&q, s, &order));
        tokio::task::yield_now().await;
    }
    drop(held);
    for h in hs {
        h.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["recent", "old", "new-1", "new-2"]);
}

#[tokio::test(start_paused = true)]
async fn busy_pods_hold_the_queue_and_a_timeout_is_504() {
    let busy = Arc::new(AtomicBool::new(true));
    let q = queue(4, Duration::ZERO, Arc::clone(&busy));
    let e = q
        .wait(None, Some(Duration::from_millis(50)))
        .await
        .unwrap_err();
    assert_eq!(e.status(), 504);
    busy.store(false, Ordering::SeqCst);
    // The timed-out entry is drained, not admitted: the next request goes at once.
    let s = q.wait(None, Some(Duration::from_millis(50))).await.unwrap();
    assert_eq!(lock(&q.state).inflight, 1);
    drop(s);
    assert_eq!(lock(&q.state).inflight, 0);
    assert_eq!(lock(&q.state).len(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_grace_period_holds_a_freed_slot_for_a_follow_up() {
    let q = queue(
        1,
        Duration::from_millis(100),
        Arc::new(AtomicBool::new(false)),
    );
    let order = Arc::new(Mutex::new(Vec::new()));
    let first = q.wait(Some("s".into()), None).await.unwrap();
    let fresh = spawn_wait(&q, "fresh", &order);
    tokio::task::yield_now().await;
    q.completed(&"s".into());
    drop(first);
    // Within the grace period the follow-up of `s` arrives and goes first.
    tokio::time::advance(Duration::from_millis(50)).await;
    let follow = spawn_wait(&q, "s", &order);
    fresh.await.unwrap();
    follow.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["s", "fresh"]);
}
