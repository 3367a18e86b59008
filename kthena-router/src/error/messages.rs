//! Messages and message parts of [`super::Error`]: what is wrong with a duration, an
//! error's chain of causes as one line, a scheduler configuration error.

/// What is wrong with a Go duration string ([`super::Error::InvalidDuration`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationProblem {
    /// A bare number (`10`): every duration of Go Kthena's config needs a unit.
    NoUnit,
    /// Below zero (`-1s`).
    Negative,
    /// Beyond Go's largest duration, 2562047h47m16.854775807s.
    TooLarge,
    /// Not Go `time.ParseDuration` syntax (`soon`, `1h-5m`).
    Syntax,
}

impl DurationProblem {
    /// The message for `value`: `` `10` has no unit: did you mean `10s`?`` for a bare
    /// number, `` `-1s` is negative: ...``, `` `9999999999h` is larger than the largest Go
    /// duration ...``, or `` `soon` is not a duration: ...`` listing the units.
    #[must_use]
    pub fn describe(self, value: &str) -> String {
        match self {
            Self::NoUnit => format!("`{value}` has no unit: did you mean `{value}s`?"),
            Self::Negative => format!("`{value}` is negative: a duration must be 0 or more"),
            Self::TooLarge => format!(
                "`{value}` is larger than the largest Go duration (2562047h47m16.854775807s)"
            ),
            Self::Syntax => format!(
                "`{value}` is not a duration: expected a number with a unit (`ns`, `us`, \
                 `ms`, `s`, `m`, `h`), such as `500ms`, `10s` or `1m30s`"
            ),
        }
    }
}

/// An error and its sources as one line for people: each cause's message once, joined by
/// `: `, without the wrapper-only messages ("client error (Connect)") of hyper's client.
/// Example: `tcp connect error: Connection refused (os error 111)`.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    kthena_api::error_chain_without(e, |m| m.starts_with("client error ("))
}

/// The message of [`super::Error::Scheduler`]: the error with its path from the top of the
/// router file, or `scheduler: <reason>` when it has none.
pub(crate) fn scheduler_message(e: &kthena_sched::Error) -> String {
    if e.path().is_some() {
        e.to_string()
    } else {
        format!("scheduler: {e}")
    }
}
