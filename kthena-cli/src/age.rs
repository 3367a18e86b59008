//! AGE as Go Kthena prints it: `time.Since(created).Truncate(time.Second).String()`.

use jiff::Timestamp;

/// Go's `time.Duration.String()` of a whole number of seconds: `0s`, `45s`, `1m0s`,
/// `1h2m3s`, `25h0m0s` (hours never roll over into days), `-5s` for a negative duration
/// (a creation time in the future, clock skew).
///
/// ```
/// assert_eq!(kthena_cli::go_duration(3723), "1h2m3s");
/// assert_eq!(kthena_cli::go_duration(60), "1m0s");
/// ```
pub fn go_duration(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let s = seconds.unsigned_abs();
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

/// The AGE of an object created at `created`, seen at `now`: the elapsed time truncated
/// toward zero to whole seconds (Go's `Duration.Truncate(time.Second)`), in
/// [`go_duration`]'s format.
pub fn age(created: Timestamp, now: Timestamp) -> String {
    let nanos = now.as_nanosecond() - created.as_nanosecond();
    // i128 / 1e9 truncates toward zero, as Go's Truncate does for negative durations.
    let seconds = i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX);
    go_duration(seconds)
}

/// A creation time as Go's `time.RFC3339` prints a UTC time: `2026-12-01T09:06:02Z`.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
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
}
