use super::*;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

#[test]
fn record_window_keeps_the_best_value_until_it_expires() {
    let mut w = RecordWindow::new(s(10), Best::Max);
    assert_eq!(w.best(s(0)), None);
    w.append(s(0), 3);
    w.append(s(1), 5);
    w.append(s(2), 4);
    assert_eq!(w.best(s(2)), Some(5));
    // Fresh while `t + window >= now`: 5 (t=1) holds at 11, 4 (t=2) takes over at 12.
    assert_eq!(w.best(s(11)), Some(5));
    assert_eq!(w.best(s(12)), Some(4));
    assert_eq!(w.best(s(13)), None);
}

#[test]
fn record_window_min_and_ties() {
    let mut w = RecordWindow::new(s(10), Best::Min);
    w.append(s(0), 4);
    w.append(s(1), 2);
    w.append(s(2), 2);
    w.append(s(3), 6);
    assert_eq!(w.best(s(3)), Some(2));
    // The later 2 (t=2) replaced the earlier one (t=1), so 2 holds until 12.
    assert_eq!(w.best(s(12)), Some(2));
    assert_eq!(w.best(s(13)), Some(6));
}

#[test]
fn zero_length_windows_never_answer() {
    let mut r = RecordWindow::new(Duration::ZERO, Best::Max);
    r.append(s(0), 7);
    assert_eq!(r.best(s(0)), None);
    let mut l = LineChartWindow::new(Duration::ZERO, Best::Min);
    l.append(s(0), 7);
    assert_eq!(l.best(s(0), 3), None);
}

#[test]
fn line_chart_window_counts_the_drifting_value_and_the_current_one() {
    let mut w = LineChartWindow::new(s(10), Best::Max);
    assert_eq!(w.best(s(0), 2), Some(2));
    w.append(s(0), 5);
    assert_eq!(w.best(s(1), 2), Some(5));
    assert_eq!(w.best(s(1), 9), Some(9));
    // 5 stops drifting at t=5 and is pooled with that time; 3 drifts from t=5.
    w.append(s(5), 3);
    assert_eq!(w.best(s(15), 1), Some(5));
    assert_eq!(w.best(s(16), 1), Some(3));
    // A drifting value lasts at most 2 × window (t=5 + 20 = 25).
    assert_eq!(w.best(s(25), 1), Some(3));
    assert_eq!(w.best(s(26), 1), Some(1));
}

#[test]
fn line_chart_min_window() {
    let mut w = LineChartWindow::new(s(60), Best::Min);
    w.append(s(0), 4);
    w.append(s(15), 8);
    w.append(s(30), 16);
    // Pool: 4 (t=15), 8 (t=30); drifting 16.
    assert_eq!(w.best(s(30), 16), Some(4));
    assert_eq!(w.best(s(75), 16), Some(4));
    assert_eq!(w.best(s(76), 16), Some(8));
    assert_eq!(w.best(s(91), 16), Some(16));
}

#[test]
fn snapshot_window_serves_the_newest_snapshot_at_least_fresh_old() {
    let mut w = SnapshotWindow::new(s(60), s(300));
    w.append(s(0), 'a');
    w.append(s(30), 'b');
    assert_eq!(w.last_unfresh(s(20)).map(|x| *x.1), None);
    w.append(s(70), 'c');
    assert_eq!(w.last_unfresh(s(70)), Some((s(0), &'a')));
    assert_eq!(w.last_unfresh(s(100)), Some((s(30), &'b')));
    assert_eq!(w.last_unfresh(s(131)), Some((s(70), &'c')));
    // Older than 300 s: gone.
    assert_eq!(w.last_unfresh(s(371)), None);
    let mut zero = SnapshotWindow::new(Duration::ZERO, s(300));
    zero.append(s(0), 1);
    assert_eq!(zero.last_unfresh(s(10)), None);
}
