//! Go durations (`1s`, `500ms`, `1h30m`) in the config file and environment variables.

use std::time::Duration;

use crate::error::{DurationProblem, Error};

/// Parses a Go duration string (`1s`, `500ms`, `1h30m`) with [`kthena_api::GoDuration`]
/// (Go `time.ParseDuration` syntax, at most Go's largest duration).
///
/// # Errors
/// [`Error::InvalidDuration`] naming the value and the [`DurationProblem`]; a bare number
/// is named without its surrounding blanks.
pub fn parse_go_duration(s: &str) -> Result<Duration, Error> {
    use kthena_api::DurationError;
    let t = s.trim();
    let bad = |value: &str, problem| Error::InvalidDuration {
        value: value.to_owned(),
        problem,
    };
    if !t.is_empty() && t.parse::<f64>().is_ok() {
        return Err(bad(t, DurationProblem::NoUnit));
    }
    kthena_api::GoDuration::new(t).parse().map_err(|e| match e {
        DurationError::Negative { .. } => bad(s, DurationProblem::Negative),
        DurationError::TooLarge { .. } => bad(s, DurationProblem::TooLarge),
        _ => bad(s, DurationProblem::Syntax),
    })
}

/// A Go duration (`1s`, `500ms`, `1h30m`) in a config file; a bare number is an error that
/// suggests the unit (`10` → did you mean `10s`?), since Go Kthena's durations all need one.
pub(crate) mod go_duration {
    use std::time::Duration;

    use serde::Deserializer;
    use serde::de::{Error, Visitor};

    struct GoDuration;

    impl Visitor<'_> for GoDuration {
        type Value = Duration;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a duration with a unit, such as `500ms`, `10s` or `1m30s`")
        }
        fn visit_str<E: Error>(self, s: &str) -> Result<Duration, E> {
            super::parse_go_duration(s).map_err(E::custom)
        }
        fn visit_u64<E: Error>(self, n: u64) -> Result<Duration, E> {
            Err(no_unit(&n.to_string()))
        }
        fn visit_i64<E: Error>(self, n: i64) -> Result<Duration, E> {
            Err(no_unit(&n.to_string()))
        }
        fn visit_f64<E: Error>(self, n: f64) -> Result<Duration, E> {
            Err(no_unit(&n.to_string()))
        }
    }

    fn no_unit<E: Error>(n: &str) -> E {
        E::custom(super::DurationProblem::NoUnit.describe(n))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(GoDuration)
    }
}
