use super::*;

fn queue(cfg: FairnessConfig) -> (Arc<FairQueue>, Arc<TokenTracker>) {
    let tracker = Arc::new(TokenTracker::new(Duration::from_secs(300), 1.0, 2.0));
    let q = FairQueue::start(
        "m".into(),
        cfg,
        Arc::clone(&tracker),
        QueueMetrics::default(),
    );
    (q, tracker)
}

/// Enqueues `user` with its current priority and returns its turn's receiver order.
fn spawn_wait(
    q: &Arc<FairQueue>,
    t: &TokenTracker,
    user: &str,
    order: &Arc<Mutex<Vec<String>>>,
    hold: bool,
) -> tokio::task::JoinHandle<()> {
    let p = t.priority(user, "m", 1.0, 0.0);
    let (q, order, user) = (Arc::clone(q), Arc::clone(order), user.to_owned());
    #[allow(clippy::disallowed_methods, reason = "test tasks, joined by the test")]
    tokio::spawn(async move {
        let slot = q
            .wait(Some(user.as_str().into()), p, Duration::from_secs(60))
            .await
            .unwrap();
        order.lock().unwrap().push(user);
        if hold {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(slot);
    })
}

#[tokio::test(start_paused = true)]
async fn lower_usage_goes_first_and_one_user_stays_fifo() {
    let cfg = FairnessConfig {
        max_concurrent: 1,
        ..FairnessConfig::default()
    };
    let (q, t) = queue(cfg);
    t.record("heavy", "m", 1000.0, 0.0);
    t.record("light", "m", 10.0, 0.0);
    let order = Arc::new(Mutex::new(Vec::new()));
    // A first request holds the only slot while the others queue.
    let first = spawn_wait(&q, &t, "first", &order, true);
    tokio::task::yield_now().await;
    let mut hs = vec![first];
    for u in ["heavy", "heavy", "light", "light", "anon"] {
        if u == "anon" {
            let (q2, o2) = (Arc::clone(&q), Arc::clone(&order));
            #[allow(clippy::disallowed_methods, reason = "test task")]
            hs.push(tokio::spawn(async move {
                let s = q2
                    .wait(None, f64::MAX, Duration::from_secs(60))
                    .await
                    .unwrap();
                o2.lock().unwrap().push("anon".into());
                drop(s);
            }));
        } else {
            hs.push(spawn_wait(&q, &t, u, &order, true));
        }
        tokio::task::yield_now().await;
    }
    for h in hs {
        h.await.unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["first", "light", "light", "heavy", "heavy", "anon"]
    );
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn qps_mode_paces_turns_and_a_timeout_is_504() {
    let cfg = FairnessConfig {
        max_qps: 10,
        timeout: Duration::from_millis(250),
        ..FairnessConfig::default()
    };
    let (q, _t) = queue(cfg);
    let start = Instant::now();
    let mut waits = Vec::new();
    for _ in 0..4 {
        let q2 = Arc::clone(&q);
        #[allow(clippy::disallowed_methods, reason = "test task")]
        waits.push(tokio::spawn(async move {
            let r = q2
                .wait(Some("u".into()), 0.0, Duration::from_millis(250))
                .await;
            (r.map(|_| ()), start.elapsed())
        }));
    }
    let mut got = Vec::new();
    for w in waits {
        got.push(w.await.unwrap());
    }
    // 100 ms apart: 0, 100, 200 ms; the fourth would be at 300 ms > 250 ms.
    for (i, (r, at)) in got.iter().take(3).enumerate() {
        assert!(r.is_ok(), "{i}");
        assert_eq!(at.as_millis() / 100, i as u128, "{i}: {at:?}");
    }
    let e = got[3].0.as_ref().unwrap_err();
    assert_eq!(e.status(), 504);
    assert_eq!(e.to_string(), "Request processing timed out in queue");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_left_is_skipped() {
    let cfg = FairnessConfig {
        max_concurrent: 1,
        ..FairnessConfig::default()
    };
    let (q, _t) = queue(cfg);
    let held = q
        .wait(Some("a".into()), 0.0, Duration::from_secs(1))
        .await
        .unwrap();
    let q2 = Arc::clone(&q);
    #[allow(clippy::disallowed_methods, reason = "test task")]
    let gone = tokio::spawn(async move {
        let _ = q2
            .wait(Some("b".into()), 0.0, Duration::from_secs(60))
            .await;
    });
    tokio::task::yield_now().await;
    gone.abort();
    let _ = gone.await;
    let q3 = Arc::clone(&q);
    #[allow(clippy::disallowed_methods, reason = "test task")]
    let next = tokio::spawn(async move {
        q3.wait(Some("c".into()), 0.0, Duration::from_secs(60))
            .await
            .map(|_| ())
    });
    tokio::task::yield_now().await;
    drop(held);
    next.await.unwrap().unwrap();
    assert_eq!(q.len(), 0);
}
