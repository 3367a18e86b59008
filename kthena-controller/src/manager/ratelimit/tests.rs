use super::*;

#[test]
fn qps_and_burst_give_the_window() {
    assert_eq!(rate_window(0.0, 10), None);
    assert_eq!(rate_window(-1.0, 10), None);
    assert_eq!(rate_window(f64::NAN, 10), None);
    assert_eq!(rate_window(5.0, 10), Some((10, Duration::from_secs(2))));
    assert_eq!(rate_window(50.0, 100), Some((100, Duration::from_secs(2))));
    assert_eq!(rate_window(2.5, 0), Some((3, Duration::from_millis(1200))));
    assert_eq!(rate_window(0.5, 1), Some((1, Duration::from_secs(2))));
    assert!(rate_limit(5.0, 10).is_some());
}
