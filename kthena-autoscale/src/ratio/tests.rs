use proptest::prelude::*;

use super::*;

fn b(min: i32, max: i32) -> Bounds {
    Bounds { min, max }
}

fn rb(min: f64, max: f64) -> RatioBounds {
    RatioBounds {
        min: Ratio::from_f64(min).unwrap(),
        max: Ratio::from_f64(max).unwrap(),
    }
}

fn run(
    n: i32,
    d: i32,
    nb: Bounds,
    db: Bounds,
    c: RatioBounds,
) -> (i32, i32, bool, bool, Option<String>) {
    let e = enforce_role_ratio(n, d, nb, db, &c);
    (
        e.numerator,
        e.denominator,
        e.adjusted,
        e.satisfied,
        e.current_ratio,
    )
}

fn r(s: &str) -> Option<String> {
    Some(s.to_owned())
}

#[test]
fn ratios_are_exact_decimals() {
    assert_eq!(Ratio::from_f64(0.7), Ratio::new(7, 10));
    assert_eq!(Ratio::from_f64(2.0), Ratio::new(2, 1));
    assert_eq!(Ratio::from_f64(0.333), Ratio::new(333, 1000));
    assert!(Ratio::from_f64(-0.5).is_err());
    assert!(Ratio::from_f64(f64::NAN).is_err());
    assert!(Ratio::from_f64(f64::INFINITY).is_err());
    assert!(Ratio::new(1, 0).is_err());
    assert_eq!(Ratio::new(3, 2).unwrap().to_string(), "1.5");
    assert_eq!(format_go_float(2.0), "2");
    assert_eq!(format_go_float(1.0 / 3.0), "0.3333333333333333");
}

#[test]
fn both_sides_zero_is_coupled_scale_to_zero() {
    assert_eq!(
        run(0, 0, b(0, 10), b(0, 10), rb(0.5, 2.0)),
        (0, 0, false, true, None)
    );
}

#[test]
fn a_zero_side_is_seeded_to_one_then_repaired() {
    // 0/4 ⇒ 1/4 = 0.25 < 0.5 ⇒ numerator ceil(0.5 × 4) = 2.
    assert_eq!(
        run(0, 4, b(0, 10), b(1, 10), rb(0.5, 2.0)),
        (2, 4, true, true, r("0.5"))
    );
    // 3/0 ⇒ 3/1 = 3 > 2 ⇒ denominator ceil(3 / 2) = 2.
    assert_eq!(
        run(3, 0, b(1, 10), b(0, 10), rb(0.5, 2.0)),
        (3, 2, true, true, r("1.5"))
    );
    // Bounds come first: a denominator with min 3 is 3, not zero, so nothing is seeded.
    assert_eq!(
        run(3, 0, b(1, 10), b(3, 10), rb(0.5, 2.0)),
        (3, 3, false, true, r("1"))
    );
}

#[test]
fn a_pair_within_the_constraint_is_kept() {
    assert_eq!(
        run(4, 4, b(0, 10), b(0, 10), rb(0.5, 2.0)),
        (4, 4, false, true, r("1"))
    );
    // Bounds are applied first.
    assert_eq!(
        run(40, 4, b(0, 8), b(0, 10), rb(0.5, 2.0)),
        (8, 4, false, true, r("2"))
    );
}

#[test]
fn raising_uses_exact_products() {
    // 1/25 < 0.28: ceil(0.28 × 25) = 7 (Go's f64 gives ceil(7.000000000000001) = 8).
    assert_eq!(
        run(1, 25, b(0, 20), b(1, 30), rb(0.28, 2.0)),
        (7, 25, true, true, r("0.28"))
    );
    assert_eq!((0.28_f64 * 25.0).ceil(), 8.0, "the f64 product this fixes");
    // floor(0.57 × 100) = 57 (f64: floor(56.99999999999999) = 56): 100/1 > 0.57 with the
    // denominator capped at 100 ⇒ n = 57.
    assert_eq!(
        run(100, 1, b(0, 100), b(1, 100), rb(0.1, 0.57)),
        (57, 100, true, true, r("0.57"))
    );
    assert_eq!(
        (0.57_f64 * 100.0).floor(),
        56.0,
        "the f64 product this fixes"
    );
}

#[test]
fn when_raising_is_impossible_the_other_side_is_lowered() {
    // 2/10 < 0.5, ceil(5) > maxN 4 ⇒ n = 4, d = floor(4 / 0.5) = 8.
    assert_eq!(
        run(2, 10, b(0, 4), b(1, 10), rb(0.5, 2.0)),
        (4, 8, true, true, r("0.5"))
    );
    // 10/2 > 2, ceil(10 / 2) = 5 > maxD 4 ⇒ d = 4, n = floor(2 × 4) = 8.
    assert_eq!(
        run(10, 2, b(1, 10), b(1, 4), rb(0.5, 2.0)),
        (8, 4, true, true, r("2"))
    );
}

#[test]
fn a_zero_max_ratio_drops_the_numerator() {
    assert_eq!(
        run(3, 2, b(0, 10), b(0, 10), rb(0.0, 0.0)),
        (0, 2, true, true, r("0"))
    );
}

#[test]
fn no_integer_between_the_bounds_searches_the_nearest_feasible_pair() {
    // min = max = 1.5: 3/3 ⇒ 5/3 after one repair (still off); d = 4 admits n = 6.
    assert_eq!(
        run(3, 3, b(0, 10), b(1, 10), rb(1.5, 1.5)),
        (6, 4, true, true, r("1.5"))
    );
}

#[test]
fn unreachable_ratios_return_the_repaired_pair_unsatisfied() {
    // Numerator at least 5, denominator at most 3, ratio at most 1: nothing fits.
    assert_eq!(
        run(5, 1, b(5, 10), b(1, 3), rb(0.5, 1.0)),
        (5, 3, true, false, r("1.6666666666666667"))
    );
    // Numerator at most 2, denominator at least 8, ratio at least 0.5: nothing fits.
    assert_eq!(
        run(1, 8, b(0, 2), b(8, 10), rb(0.5, 1.0)),
        (2, 8, true, false, r("0.25"))
    );
}

fn feasible_exists(nb: Bounds, db: Bounds, c: &RatioBounds) -> bool {
    (db.min.max(1)..=db.max).any(|d| (nb.min..=nb.max).any(|n| within(c, n, d)))
}

proptest! {
    #[test]
    fn enforced_pairs_are_bounded_and_feasible_whenever_possible(
        n in 0i32..30, d in 0i32..30,
        nmin in 0i32..6, nspan in 0i32..15, dmin in 0i32..6, dspan in 0i32..15,
        lo in 0u64..12, extra in 0u64..12,
    ) {
        let nb = b(nmin, (nmin + nspan).max(1));
        let db = b(dmin, (dmin + dspan).max(1));
        let c = RatioBounds {
            min: Ratio::new(lo, 4).unwrap(),
            max: Ratio::new((lo + extra).max(1), 4).unwrap(),
        };
        let e = enforce_role_ratio(n, d, nb, db, &c);
        prop_assert!(e.numerator >= nb.min && e.numerator <= nb.max);
        prop_assert!(e.denominator >= db.min && e.denominator <= db.max);
        let input = (nb.clamp(n), db.clamp(d));
        if input == (0, 0) {
            prop_assert_eq!((e.numerator, e.denominator, e.adjusted), (0, 0, false));
        } else {
            prop_assert_eq!(e.satisfied, feasible_exists(nb, db, &c));
            if input.0 > 0 && input.1 > 0 && within(&c, input.0, input.1) {
                prop_assert_eq!((e.numerator, e.denominator, e.adjusted), (input.0, input.1, false));
            }
        }
    }
}
