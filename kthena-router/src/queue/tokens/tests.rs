use super::*;

#[tokio::test(start_paused = true)]
async fn weighs_tokens_and_forgets_them_after_the_window() {
    let t = TokenTracker::new(Duration::from_secs(60), 1.0, 2.0);
    t.record("u", "m", 10.0, 5.0);
    tokio::time::advance(Duration::from_secs(30)).await;
    t.record("u", "m", 1.0, 0.0);
    t.record("u", "other", 100.0, 0.0);
    assert_eq!(t.usage("u", "m"), (21.0, 2));
    assert!((t.priority("u", "m", 0.5, 10.0) - 30.5).abs() < 1e-9);
    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(t.usage("u", "m"), (1.0, 1));
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(t.usage("u", "m"), (0.0, 0));
    assert_eq!(t.usage("nobody", "m"), (0.0, 0));
}

/// Regression: a pair was dropped only when its user asked again, and ids were kept
/// whole, so clients sending a new kilobyte-long `user` per request grew the router
/// without limit (400 ids of 1 MB: +475 MB that never went away).
#[tokio::test(start_paused = true)]
async fn long_ids_are_digested_and_departed_users_are_swept() {
    let t = TokenTracker::new(Duration::from_secs(60), 1.0, 1.0);
    for i in 0..100 {
        let user = format!("{i:04}{}", "x".repeat(10_000));
        t.record(&user, "m", 1.0, 0.0);
    }
    assert_eq!(t.kept(), (100, 100 * 16));
    let long = "y".repeat(10_000);
    t.record(&long, "m", 5.0, 0.0);
    assert_eq!(t.usage(&long, "m"), (5.0, 1));
    tokio::time::advance(Duration::from_secs(61)).await;
    t.record("back", "m", 1.0, 0.0);
    assert_eq!(t.kept(), (1, 4));
}
