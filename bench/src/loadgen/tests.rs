use super::*;

fn run(p50: f64, p99: f64, failed: usize) -> Measured {
    Measured {
        achieved_rps: 1000.0 - p50 / 100.0,
        sent: 5000,
        failed,
        p50_us: p50,
        p99_us: p99,
    }
}

#[test]
fn the_pacer_hands_each_request_over_in_order_not_before_its_due_time() {
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    pace(start, 1000.0, 5, &tx);
    for i in 0..5 {
        let (j, at) = rx.try_recv().unwrap();
        assert_eq!((j, at), (i, start + Duration::from_millis(i as u64)));
    }
    assert!(rx.try_recv().is_err());
    assert!(Instant::now() >= start + Duration::from_millis(4));
    assert_eq!(spec_rate(0.0), 1.0);
    assert_eq!(spec_rate(f64::NAN), 1.0);
}

#[test]
fn median_of_runs_takes_each_percentile_apart() {
    let m = Measured::median_of(&[
        run(900.0, 3000.0, 0),
        run(1500.0, 1200.0, 2),
        run(1000.0, 90_000.0, 0),
    ]);
    assert_eq!((m.p50_us, m.p99_us), (1000.0, 3000.0));
    assert_eq!((m.sent, m.failed), (15_000, 2));
    assert_eq!(m.achieved_rps, 990.0);
}
