use proptest::prelude::*;

use super::*;
use crate::behavior::{PanicPolicy, StablePolicy};

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn stable(instances: i32, percent: i32, select: SelectPolicy, window: u64) -> StablePolicy {
    StablePolicy {
        instances,
        percent,
        period: s(60),
        select_policy: select,
        stabilization_window: s(window),
    }
}

/// `decide` + `record`, returning `(corrected, mode)`.
fn step(sc: &mut Scaler, t: u64, current: i32, recommended: i32) -> (i32, Mode) {
    let d = sc.decide(s(t), current, recommended, 0, 1000);
    sc.record(s(t), recommended, d.corrected);
    (d.corrected, d.mode)
}

#[test]
fn default_scale_up_is_limited_per_period_from_the_minimum_over_it() {
    let mut sc = Scaler::new(Behavior::default());
    // p = 2: Or(2 + 4, 2 + 2) = 6.
    assert_eq!(step(&mut sc, 0, 2, 20), (6, Mode::Stable));
    // p = min(current 6, drifting 6) = 6: Or(10, 12) = 12.
    assert_eq!(step(&mut sc, 15, 6, 20), (12, Mode::Stable));
    // 6 is still within the last minute: p = 6 ⇒ 12 again.
    assert_eq!(step(&mut sc, 30, 12, 20), (12, Mode::Stable));
    // At 76 s the 6 (pooled at 15 s) expired: p = 12 ⇒ Or(16, 24) = 24, capped by R = 20.
    assert_eq!(step(&mut sc, 76, 12, 20), (20, Mode::Stable));
}

#[test]
fn scale_from_zero_in_stable_mode_adds_instances() {
    let mut sc = Scaler::new(Behavior::default());
    // p = 0: abs = 4, rel = 0; Or ⇒ 4.
    assert_eq!(step(&mut sc, 0, 0, 10), (4, Mode::Stable));
}

#[test]
fn or_and_constraints_in_both_directions() {
    let behavior = |up: SelectPolicy, down: SelectPolicy| Behavior {
        scale_up: stable(4, 100, up, 0),
        scale_down: stable(2, 50, down, 0),
        ..Behavior::default()
    };
    let first = |b: Behavior, c: i32, r: i32| step(&mut Scaler::new(b), 0, c, r).0;
    let (or, and) = (SelectPolicy::Or, SelectPolicy::And);
    // Up from 2: abs 6, rel 4.
    assert_eq!(first(behavior(or, or), 2, 20), 6);
    assert_eq!(first(behavior(and, or), 2, 20), 4);
    // Up from 10: abs 14, rel 20.
    assert_eq!(first(behavior(or, or), 10, 40), 20);
    assert_eq!(first(behavior(and, or), 10, 40), 14);
    // Down from 10: abs 8, rel 10 − 5 = 5; Or allows the larger step (5), And the smaller (8).
    assert_eq!(first(behavior(or, or), 10, 1), 5);
    assert_eq!(first(behavior(or, and), 10, 1), 8);
    // Integer division in the relative limit: 7 − 7 × 50 / 100 = 7 − 3 = 4.
    assert_eq!(first(behavior(or, or), 7, 0), 4);
    // Never past the recommendation.
    assert_eq!(first(behavior(or, or), 10, 9), 9);
}

#[test]
fn scale_down_waits_for_the_stabilization_window() {
    let mut sc = Scaler::new(Behavior::default());
    assert_eq!(step(&mut sc, 0, 10, 10), (10, Mode::Stable));
    // The maximum recommendation over 5 minutes is still 10.
    for t in [60, 120, 180, 240, 300] {
        assert_eq!(step(&mut sc, t, 10, 2), (10, Mode::Stable), "t = {t}");
    }
    // At 301 s the 10 recommended at 0 s expired: scale-down is unlimited (0 instances Or
    // 100 % ⇒ min(10, 0) = 0), so straight to 2.
    assert_eq!(step(&mut sc, 301, 10, 2), (2, Mode::Stable));
}

#[test]
fn a_higher_recommendation_within_the_window_holds_scale_down() {
    let mut sc = Scaler::new(Behavior::default());
    step(&mut sc, 0, 10, 10);
    step(&mut sc, 100, 10, 6);
    assert_eq!(step(&mut sc, 301, 10, 2), (6, Mode::Stable));
    assert_eq!(step(&mut sc, 401, 6, 2), (2, Mode::Stable));
}

fn panic_behavior(hold: u64) -> Behavior {
    Behavior {
        scale_up: stable(1, 10, SelectPolicy::Or, 0),
        panic: PanicPolicy {
            percent: 100,
            period: s(60),
            panic_threshold_percent: 200,
            panic_mode_hold: s(hold),
        },
        ..Behavior::default()
    }
}

#[test]
fn panic_mode_doubles_per_period_holds_then_falls_back_to_stable() {
    let mut sc = Scaler::new(panic_behavior(60));
    // 20 × 100 ≥ 4 × 200: panic until 60 s; p = 4 ⇒ 4 + 4 = 8.
    assert_eq!(step(&mut sc, 0, 4, 20), (8, Mode::Panic));
    assert!(sc.is_panic(s(60)) && !sc.is_panic(s(61)));
    // 20 × 100 ≥ 8 × 200: panic extended to 75 s; p = 8 ⇒ 16.
    assert_eq!(step(&mut sc, 15, 8, 20), (16, Mode::Panic));
    // Below the threshold (2000 < 3200) but still within the hold; p = min(16, 8 pooled) = 8.
    assert_eq!(step(&mut sc, 30, 16, 20), (16, Mode::Panic));
    // Hold over at 76 s: stable, p = 16 (the 8 expired) ⇒ Or(17, 17) = 17.
    assert_eq!(step(&mut sc, 76, 16, 20), (17, Mode::Stable));
}

#[test]
fn panic_mode_never_scales_down() {
    let mut sc = Scaler::new(panic_behavior(60));
    assert_eq!(step(&mut sc, 0, 4, 20), (8, Mode::Panic));
    assert_eq!(step(&mut sc, 10, 8, 2), (8, Mode::Panic));
}

#[test]
fn panic_mode_from_zero_replicas_is_unlimited() {
    let mut sc = Scaler::new(panic_behavior(60));
    // current 0: the threshold always holds; p = 0 gives no limit.
    assert_eq!(step(&mut sc, 0, 0, 50), (50, Mode::Panic));
}

#[test]
fn zero_hold_disables_panic_mode() {
    let mut sc = Scaler::new(panic_behavior(0));
    // Stable: p = 4 ⇒ Or(5, 4) = 5.
    assert_eq!(step(&mut sc, 0, 4, 20), (5, Mode::Stable));
    assert!(!sc.is_panic(s(0)));
}

#[test]
fn scale_runs_recommendation_then_correction() {
    let targets = crate::Metrics::from([("q".to_owned(), 10.0)]);
    let ready = [crate::Metrics::from([("q".to_owned(), 200.0)])];
    let empty = crate::Metrics::new();
    let o = Observation {
        min_replicas: 1,
        max_replicas: 10,
        current: 2,
        tolerance: 0.1,
        targets: &targets,
        unready: 0,
        ready: &ready,
        external: &empty,
    };
    let mut sc = Scaler::new(Behavior::default());
    let d = sc.scale(s(0), &o).expect("a value");
    assert_eq!(
        d,
        Decision {
            current: 2,
            recommended: 10,
            corrected: 6,
            mode: Mode::Stable
        }
    );
    assert_eq!(Mode::Panic.as_str(), "Panic");
    let none = Observation { ready: &[], ..o };
    assert_eq!(sc.scale(s(15), &none), None);
}

proptest! {
    #[test]
    fn corrections_stay_between_current_and_recommendation(
        steps in prop::collection::vec((0u64..40, 0i32..60, 0i32..60), 1..40),
        hold in prop::sample::select(vec![0u64, 30, 60]),
        window in prop::sample::select(vec![0u64, 60, 300]),
    ) {
        let mut b = panic_behavior(hold);
        b.scale_down.stabilization_window = s(window);
        let mut sc = Scaler::new(b);
        let mut t = 0;
        for (dt, current, recommended) in steps {
            t += dt;
            let d = sc.decide(s(t), current, recommended, 0, 50);
            sc.record(s(t), recommended, d.corrected);
            prop_assert!((0..=50).contains(&d.corrected));
            let cur = current.min(50);
            if d.mode == Mode::Panic {
                prop_assert!(d.corrected >= cur);
            } else if recommended > current {
                prop_assert!(d.corrected >= cur && d.corrected <= recommended.min(50));
            } else if recommended < current {
                prop_assert!(d.corrected >= recommended.min(50) && d.corrected <= cur);
            } else {
                prop_assert_eq!(d.corrected, recommended.min(50));
            }
        }
    }
}
