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
mod tests;
