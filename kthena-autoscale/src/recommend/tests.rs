use proptest::prelude::*;

use super::*;

const M: &str = "vllm:num_requests_waiting";

fn metrics(pairs: &[(&str, f64)]) -> Metrics {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

struct Case {
    min: i32,
    max: i32,
    current: i32,
    unready: i32,
    targets: Metrics,
    ready: Vec<Metrics>,
    external: Metrics,
}

impl Case {
    fn new(current: i32, sum: f64) -> Self {
        Self {
            min: 1,
            max: 100,
            current,
            unready: 0,
            targets: metrics(&[(M, 10.0)]),
            ready: vec![metrics(&[(M, sum)])],
            external: Metrics::new(),
        }
    }

    fn run(&self) -> Option<i32> {
        recommend(&Observation {
            min_replicas: self.min,
            max_replicas: self.max,
            current: self.current,
            tolerance: 0.1,
            targets: &self.targets,
            unready: self.unready,
            ready: &self.ready,
            external: &self.external,
        })
    }
}

#[test]
fn current_outside_the_bounds_is_brought_back_whatever_the_metrics() {
    let mut c = Case::new(0, 1000.0);
    c.min = 2;
    assert_eq!(c.run(), Some(2));
    let mut c = Case::new(120, 0.0);
    c.ready.clear();
    assert_eq!(c.run(), Some(100));
}

#[test]
fn pod_summed_load_over_target_gives_ceil_of_sum_over_target() {
    // 45 waiting in total, 10 per replica: ceil(4.5) = 5.
    assert_eq!(Case::new(2, 45.0).run(), Some(5));
    assert_eq!(Case::new(8, 45.0).run(), Some(5));
    // Clamped to max.
    assert_eq!(Case::new(2, 4500.0).run(), Some(100));
    // Zero load goes to min.
    assert_eq!(Case::new(3, 0.0).run(), Some(1));
}

#[test]
fn the_tolerance_band_is_relative_to_current_replicas() {
    // 10 replicas at 105 waiting: 10.5 / 10 − 1 = 0.05 ≤ 0.1 ⇒ stay at 10 (Go: 11).
    assert_eq!(Case::new(10, 105.0).run(), Some(10));
    // 10 replicas at 10.5 waiting: 1.05 / 10 − 1 = −0.895 ⇒ ceil(1.05) = 2 (Go: 10).
    assert_eq!(Case::new(10, 10.5).run(), Some(2));
    // Inside the band: 109 ⇒ 10.9 / 10 − 1 = 0.09 ⇒ stay; outside: 111 ⇒ ceil(11.1) = 12.
    assert_eq!(Case::new(10, 109.0).run(), Some(10));
    assert_eq!(Case::new(10, 111.0).run(), Some(12));
}

#[test]
fn one_entry_per_target_averages_then_multiplies_back() {
    // Heterogeneous: two targets report 30 and 50: ratio = 80 / 2 / 10 = 4 ⇒ ceil(4 × 2) = 8.
    let mut c = Case::new(4, 0.0);
    c.ready = vec![metrics(&[(M, 30.0)]), metrics(&[(M, 50.0)])];
    assert_eq!(c.run(), Some(8));
}

#[test]
fn missing_entries_never_reverse_the_direction() {
    // Scale-up with one entry missing: n' = 2, r' = 30 / 2 / 10 = 1.5, d = 3.
    let mut c = Case::new(2, 0.0);
    c.ready = vec![metrics(&[(M, 30.0)]), Metrics::new()];
    assert_eq!(c.run(), Some(3));
    // Same load at 4 replicas: d = 3 < 4 while r' ≥ 1 ⇒ stay at 4.
    c.current = 4;
    assert_eq!(c.run(), Some(4));
    // Scale-down: the missing entry counts as at target: S = 5 + 10, r' = 0.75, d = 2.
    c.ready = vec![metrics(&[(M, 5.0)]), Metrics::new()];
    assert_eq!(c.run(), Some(2));
    // ... and d = 2 > 1 replica while r' < 1 ⇒ stay at 1.
    c.current = 1;
    assert_eq!(c.run(), Some(1));
}

#[test]
fn unready_pods_count_only_when_scaling_up() {
    // 60 waiting, 2 unready: n' = 3, r' = 2, d = 6.
    let mut c = Case::new(3, 60.0);
    c.unready = 2;
    assert_eq!(c.run(), Some(6));
    // Below target the unready pods are ignored: ceil(0.5) = 1.
    let mut c = Case::new(3, 5.0);
    c.unready = 2;
    assert_eq!(c.run(), Some(1));
    // Adding 3 unready pods flips 1.2 to 0.24: a change of direction ⇒ stay.
    let mut c = Case::new(2, 0.0);
    c.ready = vec![metrics(&[(M, 12.0)]), Metrics::new()];
    c.unready = 3;
    assert_eq!(c.run(), Some(2));
    // Within the band after adding them ⇒ stay: 21 waiting, 1 unready: r' = 21 / 2 / 10 = 1.05.
    let mut c = Case::new(5, 21.0);
    c.unready = 1;
    assert_eq!(c.run(), Some(5));
}

#[test]
fn external_metrics_win_over_pod_metrics_and_use_the_band_around_current() {
    let mut c = Case::new(4, 1000.0);
    c.external = metrics(&[(M, 45.0)]);
    // 45 / 10 = 4.5; 4.5 / 4 − 1 = 0.125 > 0.1 ⇒ ceil(4.5) = 5 (the pod value 1000 is ignored).
    assert_eq!(c.run(), Some(5));
    c.external = metrics(&[(M, 42.0)]);
    assert_eq!(c.run(), Some(4));
}

#[test]
fn the_largest_metric_wins_and_no_value_means_skip() {
    let mut c = Case::new(2, 45.0);
    c.targets.insert("kv".to_owned(), 0.5);
    c.ready[0].insert("kv".to_owned(), 4.0);
    // waiting ⇒ 5, kv 4.0 / 0.5 ⇒ 8.
    assert_eq!(c.run(), Some(8));
    c.ready = vec![metrics(&[("other", 1.0)])];
    assert_eq!(c.run(), None);
    c.ready.clear();
    assert_eq!(c.run(), None);
    c.targets.clear();
    assert_eq!(
        Case {
            targets: Metrics::new(),
            ..Case::new(2, 45.0)
        }
        .run(),
        None
    );
}

/// A value that parses but means nothing (NaN, ±Inf, negative, 1e300) is no value: the
/// metric gives no recommendation (skip), never the minimum or the maximum.
#[test]
fn meaningless_values_give_no_recommendation() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1e300] {
        let c = Case::new(4, bad);
        assert_eq!(c.run(), None, "pod value {bad}");
        let mut c = Case::new(4, 45.0);
        c.external = metrics(&[(M, bad)]);
        assert_eq!(c.run(), None, "external value {bad}");
        // One bad entry of several (heterogeneous targets) spoils the metric for the round.
        let mut c = Case::new(4, 45.0);
        c.ready.push(metrics(&[(M, bad)]));
        assert_eq!(c.run(), None, "second entry {bad}");
    }
}

#[test]
fn ceil_saturates() {
    assert_eq!(ceil_replicas(f64::NAN), 0);
    assert_eq!(ceil_replicas(-3.5), 0);
    assert_eq!(ceil_replicas(2.000_000_1), 3);
    assert_eq!(ceil_replicas(2e9), MAX_RECOMMENDATION);
    assert_eq!(ceil_replicas(f64::INFINITY), MAX_RECOMMENDATION);
}

proptest! {
    #[test]
    fn recommendations_stay_within_bounds(
        min in 0i32..50, span in 0i32..50, current in 0i32..120,
        sum in 0.0f64..10_000.0, unready in 0i32..5,
    ) {
        let mut c = Case::new(current, sum);
        c.min = min;
        c.max = min + span.max(1);
        c.unready = unready;
        let r = c.run().expect("the metric has a value");
        prop_assert!(r >= c.min && r <= c.max);
    }

    #[test]
    fn recommendations_rise_monotonically_with_load(
        current in 1i32..100, a in 0.0f64..2_000.0, b in 0.0f64..2_000.0,
    ) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let r_lo = Case::new(current, lo).run();
        let r_hi = Case::new(current, hi).run();
        prop_assert!(r_lo <= r_hi, "{lo} ⇒ {r_lo:?}, {hi} ⇒ {r_hi:?}");
    }
}
