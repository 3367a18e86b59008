use super::*;

#[test]
fn go_duration_matches_go_strings() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(9), "9s");
    assert_eq!(go_duration(59), "59s");
    assert_eq!(go_duration(60), "1m0s");
    assert_eq!(go_duration(61), "1m1s");
    assert_eq!(go_duration(3599), "59m59s");
    assert_eq!(go_duration(3600), "1h0m0s");
    assert_eq!(go_duration(3723), "1h2m3s");
    assert_eq!(go_duration(90_000), "25h0m0s");
    assert_eq!(go_duration(-5), "-5s");
    assert_eq!(go_duration(-3723), "-1h2m3s");
}

#[test]
fn age_truncates_to_seconds() {
    let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let now: Timestamp = "2026-01-01T01:02:03.999Z".parse().unwrap();
    assert_eq!(age(created, now), "1h2m3s");
    let now: Timestamp = "2026-01-01T00:00:00.999Z".parse().unwrap();
    assert_eq!(age(created, now), "0s");
    let earlier: Timestamp = "2025-12-31T23:59:58.5Z".parse().unwrap();
    assert_eq!(age(created, earlier), "-1s");
}

#[test]
fn rfc3339_is_utc_with_z() {
    let t: Timestamp = "2026-12-01T09:06:02.5Z".parse().unwrap();
    assert_eq!(rfc3339(t), "2026-12-01T09:06:02Z");
}
