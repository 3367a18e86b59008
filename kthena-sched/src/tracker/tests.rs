use std::sync::Mutex;

use super::*;

fn counts(t: &LoadTracker) -> (u32, u32, u64) {
    (
        t.in_flight(),
        t.awaiting_first_token(),
        t.pending_prefill_tokens(),
    )
}

#[test]
fn add_at_send_subtract_at_first_byte_settle_at_end() {
    let t = Arc::new(LoadTracker::new());
    let mut a = t.begin(100);
    let b = t.begin(40);
    assert_eq!(counts(&t), (2, 2, 140));
    a.first_byte();
    assert!(a.has_first_byte());
    assert_eq!(counts(&t), (2, 1, 40));
    a.first_byte();
    assert_eq!(
        counts(&t),
        (2, 1, 40),
        "a second first byte changes nothing"
    );
    drop(a);
    assert_eq!(counts(&t), (1, 1, 40));
    // Ended (or cancelled) before its first byte: everything goes back at once.
    drop(b);
    assert_eq!(counts(&t), (0, 0, 0));
}

#[test]
fn release_hooks_run_once_after_the_counts_are_back() {
    let t = Arc::new(LoadTracker::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut g = t.begin(7);
    for name in ["first", "second"] {
        let (seen, t) = (Arc::clone(&seen), Arc::clone(&t));
        g.on_release(move || seen.lock().unwrap().push((name, counts(&t))));
    }
    assert!(seen.lock().unwrap().is_empty());
    drop(g);
    assert_eq!(
        *seen.lock().unwrap(),
        [("first", (0, 0, 0)), ("second", (0, 0, 0))]
    );
}

#[test]
fn fill_writes_only_the_three_counts() {
    let t = Arc::new(LoadTracker::new());
    let _g = t.begin(12);
    let mut m = Metrics {
        in_flight: 99,
        running_requests: 3,
        kv_cache_usage: 0.5,
        ..Metrics::default()
    };
    t.fill(&mut m);
    assert_eq!(
        m,
        Metrics {
            in_flight: 1,
            running_requests: 3,
            kv_cache_usage: 0.5,
            awaiting_first_token: 1,
            pending_prefill_tokens: 12,
            ..Metrics::default()
        }
    );
}
