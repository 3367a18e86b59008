use super::*;

#[test]
fn meaningless_values_are_refused_with_their_reason() {
    assert_eq!(check_sample(f64::NAN), Err(InvalidSample::NotANumber));
    assert_eq!(check_sample(f64::INFINITY), Err(InvalidSample::Infinite));
    assert_eq!(
        check_sample(f64::NEG_INFINITY),
        Err(InvalidSample::Infinite)
    );
    assert_eq!(check_sample(-1.0), Err(InvalidSample::Negative));
    assert_eq!(check_sample(-1e-9), Err(InvalidSample::Negative));
    assert_eq!(check_sample(1e300), Err(InvalidSample::TooLarge));
    assert_eq!(check_sample(1.000_000_1e15), Err(InvalidSample::TooLarge));
}

#[test]
fn ordinary_values_pass_unchanged() {
    for v in [0.0, -0.0, 0.25, 8.0, 1e9, MAX_SAMPLE] {
        assert_eq!(check_sample(v), Ok(v));
        assert!(is_usable(v));
    }
    assert!(!is_usable(f64::NAN));
}
