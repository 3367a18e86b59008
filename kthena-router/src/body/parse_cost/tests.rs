use super::*;

#[test]
fn small_bodies_are_free_and_large_ones_cost_per_value() {
    assert_eq!(parse_cost(br#"{"model":"m","prompt":[0,0,0]}"#), 0);
    let ids = vec!["0"; 40_000].join(",");
    let body = format!(r#"{{"model":"m","prompt":[{ids}]}}"#);
    // The object, 2 keys, "m", the array and its 40,000 numbers.
    assert_eq!(
        parse_cost(body.as_bytes()),
        (1 + 2 + 1 + 1 + 40_000) * BYTES_PER_VALUE
    );
    let prose = "word, ".repeat(20_000);
    let body = format!(r#"{{"model":"m","prompt":"{prose}"}}"#);
    assert_eq!(parse_cost(body.as_bytes()), 5 * BYTES_PER_VALUE);
    assert_eq!(parse_cost(&vec![b'['; COUNT_FROM_BYTES]), 0);
}
