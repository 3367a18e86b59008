use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::behavior::{SelectPolicy, StablePolicy};

fn params() -> Vec<TargetParam> {
    vec![
        TargetParam {
            cost: 10,
            min_replicas: 1,
            max_replicas: 10,
        },
        TargetParam {
            cost: 3,
            min_replicas: 0,
            max_replicas: 8,
        },
    ]
}

fn blocks(order: &[Block]) -> Vec<(usize, i32, i64)> {
    order
        .iter()
        .map(|b| (b.target, b.replicas, b.cost))
        .collect()
}

#[test]
fn geometric_packages_sorted_by_cost_then_index() {
    // A (span 9): 1, 2, 4, 2 at cost 10 each; B (span 8): 1, 2, 4, 1 at cost 3 each.
    assert_eq!(
        blocks(&scaling_order(&params(), 200)),
        vec![
            (1, 1, 3),
            (1, 1, 3),
            (1, 2, 6),
            (0, 1, 10),
            (1, 4, 12),
            (0, 2, 20),
            (0, 2, 20),
            (0, 4, 40),
        ]
    );
    // 100 %: one package per target.
    assert_eq!(
        blocks(&scaling_order(&params(), 100)),
        vec![(1, 8, 3), (0, 9, 10)]
    );
    // Below 100 % the packages stay at one replica.
    assert_eq!(scaling_order(&params(), 50).len(), 17);
    // 150 %: L = 1, 1.5, 2.25, 3.375, 5.06 ⇒ 1, 1, 2, 3, then the remaining 1 (span 8);
    // by cost: 1, 1, 1, 2, 3.
    let one = [TargetParam {
        cost: 2,
        min_replicas: 0,
        max_replicas: 8,
    }];
    let lens: Vec<i32> = scaling_order(&one, 150)
        .iter()
        .map(|b| b.replicas)
        .collect();
    assert_eq!(lens, vec![1, 1, 1, 2, 3]);
    // No span, no packages.
    let fixed = [TargetParam {
        cost: 1,
        min_replicas: 3,
        max_replicas: 3,
    }];
    assert!(scaling_order(&fixed, 200).is_empty());
}

#[test]
fn distribution_fills_the_cheapest_packages_first() {
    let o = Optimizer::new(params(), 200, Behavior::default());
    assert_eq!(o.bounds(), (1, 18));
    assert_eq!(o.distribute(0), vec![1, 0]);
    assert_eq!(o.distribute(1), vec![1, 0]);
    assert_eq!(o.distribute(5), vec![1, 4]);
    // The next package is A's first (cost 10) before B's 4 (cost 12).
    assert_eq!(o.distribute(6), vec![2, 4]);
    assert_eq!(o.distribute(7), vec![2, 5]);
    assert_eq!(o.distribute(10), vec![2, 8]);
    assert_eq!(o.distribute(100), vec![10, 8]);
}

#[test]
fn external_metrics_are_summed_or_replica_weighted() {
    let obs = |current, util: f64, queue: f64, ready: bool| TargetObservation {
        current,
        unready: 0,
        ready: ready.then(Metrics::new),
        external: Metrics::from([
            ("gpu_Utilization".to_owned(), util),
            ("queue".to_owned(), queue),
        ]),
    };
    let agg = aggregate_external(&[
        obs(2, 0.9, 5.0, true),
        obs(6, 0.5, 7.0, true),
        obs(9, 0.0, 100.0, false),
    ]);
    // (0.9 × 2 + 0.5 × 6) / 8 and 5 + 7; the target that did not report is left out.
    assert_eq!(agg["gpu_Utilization"], (0.9 * 2.0 + 0.5 * 6.0) / 8.0);
    assert_eq!(agg["queue"], 12.0);
    let agg = aggregate_external(&[obs(0, 0.9, 1.0, true), obs(0, 0.5, 1.0, true)]);
    assert_eq!(agg["gpu_Utilization"], 0.7);
    for (name, ratio) in [
        ("kv_cache_usage", true),
        ("x_RATIO", true),
        ("cpu_percent", true),
        ("disk_saturation", true),
        ("request_rate", false),
        ("num_requests_waiting", false),
    ] {
        assert_eq!(is_ratio_metric(name), ratio, "{name}");
    }
}

fn observe(current: i32, q: f64) -> TargetObservation {
    TargetObservation {
        current,
        unready: 0,
        ready: Some(Metrics::from([("q".to_owned(), q)])),
        external: Metrics::new(),
    }
}

#[test]
fn one_round_recommends_corrects_and_distributes() {
    let mut o = Optimizer::new(params(), 200, Behavior::default());
    let targets = Metrics::from([("q".to_owned(), 10.0)]);
    // Two reporting targets, 30 + 20 queued, 3 replicas: ratio 50 / 2 / 10 = 2.5 ⇒ 5.
    let d = o
        .scale(
            Duration::ZERO,
            0.1,
            &targets,
            &[observe(1, 30.0), observe(2, 20.0)],
        )
        .expect("metrics");
    assert_eq!(
        (d.total.current, d.total.recommended, d.total.corrected),
        (3, 5, 5)
    );
    assert_eq!(d.replicas, vec![1, 4]);
    // A target whose metrics failed counts towards the current total only.
    let failed = TargetObservation {
        current: 2,
        ..TargetObservation::default()
    };
    let d = o
        .scale(
            Duration::from_secs(15),
            0.1,
            &targets,
            &[observe(1, 100.0), failed],
        )
        .expect("metrics");
    // 100 / 1 / 10 = 10 from 3: stable limit p = 3 ⇒ Or(7, 6) = 7.
    assert_eq!((d.total.recommended, d.total.corrected), (10, 7));
    assert_eq!(d.replicas, vec![2, 5]);
    let nothing = TargetObservation {
        current: 3,
        ..TargetObservation::default()
    };
    assert_eq!(
        o.scale(Duration::from_secs(30), 0.1, &targets, &[nothing]),
        None
    );
}

#[test]
fn recommendation_windows_record_recommendations_not_corrections() {
    // Scale down by at most max(1, 10 %) per minute, 5 minute stabilization.
    let behavior = Behavior {
        scale_down: StablePolicy {
            instances: 1,
            percent: 10,
            period: Duration::from_secs(60),
            select_policy: SelectPolicy::Or,
            stabilization_window: Duration::from_secs(300),
        },
        ..Behavior::default()
    };
    let one = vec![TargetParam {
        cost: 1,
        min_replicas: 0,
        max_replicas: 20,
    }];
    let mut o = Optimizer::new(one, 200, behavior);
    let targets = Metrics::from([("q".to_owned(), 10.0)]);
    let d = o
        .scale(Duration::ZERO, 0.1, &targets, &[observe(10, 20.0)])
        .expect("metrics");
    assert_eq!((d.total.recommended, d.total.corrected), (2, 9));
    // The window holds the recommendation 2, so the next step continues to 8. (Go's release
    // recorded the corrected 9 there and stayed at 9 for the whole window.)
    let d = o
        .scale(Duration::from_secs(60), 0.1, &targets, &[observe(9, 20.0)])
        .expect("metrics");
    assert_eq!((d.total.recommended, d.total.corrected), (2, 8));
}

proptest! {
    #[test]
    fn distributions_are_bounded_complete_and_monotonic(
        raw in prop::collection::vec((0i32..20, 0i32..10, 1i32..12), 1..6),
        rate in prop::sample::select(vec![0, 50, 100, 150, 200, 300]),
        total in 0i32..80,
    ) {
        let params: Vec<TargetParam> = raw
            .iter()
            .map(|&(cost, min, span)| TargetParam { cost, min_replicas: min, max_replicas: min + span })
            .collect();
        let o = Optimizer::new(params.clone(), rate, Behavior::default());
        let (lo, hi) = o.bounds();
        let a = o.distribute(total);
        let b = o.distribute(total + 1);
        prop_assert_eq!(a.iter().sum::<i32>(), total.clamp(lo, hi));
        for (i, p) in params.iter().enumerate() {
            prop_assert!(a[i] >= p.min_replicas && a[i] <= p.max_replicas);
            prop_assert!(b[i] >= a[i]);
        }
    }
}
