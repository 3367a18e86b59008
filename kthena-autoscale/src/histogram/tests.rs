use super::*;

const INF: f64 = f64::INFINITY;

fn h(counts: [u64; 4]) -> Histogram {
    Histogram::new(
        counts[3],
        0.0,
        vec![
            (1.0, counts[2]),
            (INF, counts[3]),
            (0.1, counts[0]),
            (0.5, counts[1]),
        ],
    )
}

#[test]
fn buckets_are_sorted_by_upper_bound() {
    let x = h([10, 50, 90, 100]);
    let les: Vec<f64> = x.buckets.iter().map(|b| b.0).collect();
    assert_eq!(les, vec![0.1, 0.5, 1.0, INF]);
}

#[test]
fn p95_of_a_cumulative_histogram_uses_twice_the_last_bound_for_inf() {
    // rank = 95, in the +Inf bucket (ranks 91..=100): 2.0 − (100 − 95) × (2.0 − 1.0) / 10.
    assert_eq!(quantile_in_diff(95, &h([10, 50, 90, 100]), None), Ok(1.5));
}

#[test]
fn p95_over_bucket_deltas() {
    let past = h([10, 40, 80, 80]);
    // Deltas [10, 30, 35, 40]: N = 40, rank = ceil(38) = 38 in +Inf: 2 − 2 × 1 / 5.
    assert_eq!(
        quantile_in_diff(95, &h([20, 70, 115, 120]), Some(&past)),
        Ok(1.6)
    );
    // Deltas [10, 30, 39, 40]: rank 38 in (0.5, 1.0] with 9 samples: 1 − 1 × 0.5 / 9.
    assert_eq!(
        quantile_in_diff(95, &h([20, 70, 119, 120]), Some(&past)),
        Ok(0.944_444_444_444_444_4)
    );
    // A bucket count going down before the rank is reached is an error.
    assert!(quantile_in_diff(95, &h([20, 70, 75, 120]), Some(&past)).is_err());
    let past2 = past;
    let now = h([30, 60, 100, 101]);
    // Deltas [20, 20, 20, 21]: N = 21, rank = ceil(19.95) = 20 sits at the top of the first bucket: exactly 0.1.
    assert_eq!(quantile_in_diff(95, &now, Some(&past2)), Ok(0.1));
}

#[test]
fn no_new_observations_give_zero_and_bad_inputs_are_errors() {
    let x = h([10, 50, 90, 100]);
    assert_eq!(quantile_in_diff(95, &x, Some(&x)), Ok(0.0));
    assert_eq!(quantile_in_diff(95, &Histogram::default(), None), Ok(0.0));
    assert!(matches!(
        quantile_in_diff(0, &x, None),
        Err(Error::Histogram(_))
    ));
    assert!(matches!(
        quantile_in_diff(101, &x, None),
        Err(Error::Histogram(_))
    ));
    // An engine restart resets the counters: the count goes down.
    assert!(quantile_in_diff(95, &h([1, 1, 1, 1]), Some(&x)).is_err());
    let other = Histogram::new(100, 0.0, vec![(1.0, 90), (INF, 100)]);
    assert!(quantile_in_diff(95, &h([10, 50, 90, 200]), Some(&other)).is_err());
}

#[test]
fn pod_histograms_take_deltas_against_the_newest_snapshot_a_minute_old() {
    let s = Duration::from_secs;
    let start = Some(s(1));
    let mut pods = PodHistograms::new();
    // No history: the cumulative histogram (rank 76 of 80 in (0.5, 1.0]: 1 − 4 × 0.5 / 40).
    assert_eq!(pods.p95(s(0), "p", start, h([10, 40, 80, 80])), Ok(0.95));
    // 30 s later the only snapshot is still fresh: cumulative again (rank 95 in (0.5, 1.0]).
    assert_eq!(
        pods.p95(s(30), "p", start, h([15, 55, 100, 100])),
        Ok(1.0 - 5.0 * 0.5 / 45.0)
    );
    // At 70 s the snapshot of t=0 is a minute old: the delta against it.
    assert_eq!(pods.p95(s(70), "p", start, h([20, 70, 115, 120])), Ok(1.6));
    // The pod restarted (new start time): the history is dropped, cumulative again.
    assert_eq!(
        pods.p95(s(140), "p", Some(s(130)), h([10, 50, 90, 100])),
        Ok(1.5)
    );
    // Forgotten pods start over too.
    pods.p95(s(200), "q", start, h([10, 50, 90, 100])).unwrap();
    pods.retain(|k| k != "q");
    assert_eq!(
        pods.p95(s(270), "q", start, h([20, 70, 115, 120])),
        Ok(1.0 - 0.5 / 45.0)
    );
}
