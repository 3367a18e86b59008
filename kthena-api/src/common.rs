//! Types shared by several kinds: durations, field errors, validation helpers.

use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Go `metav1.Duration` as written in a manifest (`"100ms"`, `"1m"`, `"1h30m"`).
///
/// The original text is kept so that a document round-trips unchanged; [`GoDuration::parse`]
/// turns it into a [`std::time::Duration`] using `kube::core::Duration` (Go
/// `time.ParseDuration` syntax). `validate()` of every kind reports unparsable values with their
/// JSON path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct GoDuration(pub String);

// === impl GoDuration ===

impl GoDuration {
    /// Wraps a Go duration string without checking it.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// Parses the text as a Go duration.
    ///
    /// # Errors
    /// [`DurationError`] when the text is empty, not a Go duration, negative, or beyond the
    /// largest Go `time.Duration`; its message quotes the text.
    pub fn parse(&self) -> std::result::Result<Duration, DurationError> {
        // Go's `time.ParseDuration` refuses an empty string, and anything beyond the largest
        // `time.Duration` (i64 nanoseconds, about 2562047h).
        let text = || self.0.clone();
        if self.0.trim().is_empty() {
            return Err(DurationError::Empty { text: text() });
        }
        match go_range(&self.0) {
            Range::Within => {}
            Range::TooLarge => return Err(DurationError::TooLarge { text: text() }),
            Range::InnerSign => return Err(DurationError::InnerSign { text: text() }),
        }
        let parsed: kube::core::Duration =
            self.0.parse().map_err(|source| DurationError::Syntax {
                text: text(),
                source,
            })?;
        if parsed.is_negative() {
            return Err(DurationError::Negative { text: text() });
        }
        let parsed = Duration::from(parsed);
        if parsed.as_nanos() > i64::MAX as u128 {
            return Err(DurationError::TooLarge { text: text() });
        }
        Ok(parsed)
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a [`GoDuration`] is not a usable duration (Go `time.ParseDuration` rules, and not
/// negative).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// The text is empty.
    #[error("invalid duration {text:?} (expected e.g. \"100ms\" or \"1m30s\"): empty string")]
    Empty {
        /// The text as written.
        text: String,
    },
    /// The text is not a Go duration.
    #[error("invalid duration {text:?} (expected e.g. \"100ms\" or \"1m30s\"): {source}")]
    Syntax {
        /// The text as written.
        text: String,
        /// What the duration parser rejected.
        #[source]
        source: kube::core::duration::ParseError,
    },
    /// The duration is negative.
    #[error("invalid duration {text:?}: must not be negative")]
    Negative {
        /// The text as written.
        text: String,
    },
    /// A component after the first has a sign (`1h-5m`); Go allows one only at the start.
    #[error("invalid duration {text:?}: a sign is allowed only at the start")]
    InnerSign {
        /// The text as written.
        text: String,
    },
    /// The duration is beyond the largest Go duration (i64 nanoseconds).
    #[error(
        "invalid duration {text:?}: larger than the maximum Go duration (2562047h47m16.854775807s)"
    )]
    TooLarge {
        /// The text as written.
        text: String,
    },
}

/// What [`go_range`] found.
enum Range {
    /// Nothing that could overflow; the parser decides the rest.
    Within,
    /// The sum is beyond the largest Go duration, or a number is not finite.
    TooLarge,
    /// A component after the first has a sign (`1h-5m`).
    InnerSign,
}

/// Reads `text` as `kube::core::Duration`'s parser does (number, unit, repeated) and checks
/// what that parser does not: kube-core 5 multiplies each component into a
/// `std::time::Duration`, which panics on a value beyond its range or below zero
/// (`88888888888888888888888888888h`, `1h-5m`; found by fuzzing). Anything else that is
/// wrong (no unit, an unknown unit, a bad number) is left to the parser to report.
fn go_range(text: &str) -> Range {
    /// The largest Go duration (`math.MaxInt64` nanoseconds) in seconds, as near as `f64`
    /// holds it (the exact bound is checked on the parsed value).
    const MAX_SECS: f64 = 9_223_372_036.854_776;
    let mut s = text.trim().trim_start_matches('+').trim_start_matches('-');
    let mut total = 0.0f64;
    while !s.is_empty() && s != "0" {
        let Some(unit_start) = s.find(char::is_alphabetic) else {
            return Range::Within;
        };
        let (value, rest) = s.split_at(unit_start);
        let Ok(value) = value.parse::<f64>() else {
            return Range::Within;
        };
        let unit_end = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        let (unit, next) = rest.split_at(unit_end);
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "\u{00b5}s" | "\u{03bc}s" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Range::Within,
        };
        if value.is_sign_negative() {
            return Range::InnerSign;
        }
        total += value * secs;
        if !total.is_finite() || total > MAX_SECS {
            return Range::TooLarge;
        }
        s = next;
    }
    Range::Within
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One validation problem: the JSON path of the offending field and a message.
///
/// Paths use dots for fields and `[i]` for list items, map keys are written `[key]`,
/// for example `spec.rules[1].targetModels[0].weight` or
/// `spec.homogeneousTarget.target.metricSources[kv_cache]`. Messages follow the wording of Go
/// Kthena's CEL rules and admission webhooks where those exist.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.rules[0].targetModels[0].weight`.
    pub path: String,
    /// What is wrong, e.g. `must be between 0 and 100`.
    pub message: String,
}

impl FieldError {
    /// Creates a field error.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects [`FieldError`]s during validation.
#[derive(Debug, Default)]
pub(crate) struct Errors(pub(crate) Vec<FieldError>);

impl Errors {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(path, message));
    }

    pub(crate) fn finish(self) -> std::result::Result<(), Vec<FieldError>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }

    pub(crate) fn duration(&mut self, path: &str, d: Option<&GoDuration>) -> Option<Duration> {
        let d = d?;
        match d.parse() {
            Ok(v) => Some(v),
            Err(e) => {
                self.push(path, e.to_string());
                None
            }
        }
    }

    pub(crate) fn max_len(&mut self, path: &str, value: Option<&str>, max: usize) {
        if let Some(v) = value
            && v.chars().count() > max
        {
            self.push(path, format!("must be at most {max} characters"));
        }
    }

    pub(crate) fn pattern(&mut self, path: &str, value: &str, pattern: &'static str) {
        if !matches_pattern(value, pattern) {
            self.push(path, format!("must match pattern {pattern}"));
        }
    }

    pub(crate) fn range_i64(&mut self, path: &str, value: Option<i64>, min: i64, max: i64) {
        if let Some(v) = value
            && (v < min || v > max)
        {
            self.push(path, format!("must be between {min} and {max}"));
        }
    }
}

/// Whether `value` matches `pattern`. Patterns are constants of this crate; each is compiled
/// once and cached (a compile failure, which the tests rule out, means "no match").
pub(crate) fn matches_pattern(value: &str, pattern: &'static str) -> bool {
    type Cache = HashMap<&'static str, Option<regex::Regex>>;
    static CACHE: LazyLock<RwLock<Cache>> = LazyLock::new(RwLock::default);
    if let Ok(cache) = CACHE.read()
        && let Some(re) = cache.get(pattern)
    {
        return re.as_ref().is_some_and(|re| re.is_match(value));
    }
    let re = regex::Regex::new(pattern).ok();
    let matched = re.as_ref().is_some_and(|re| re.is_match(value));
    if let Ok(mut cache) = CACHE.write() {
        cache.insert(pattern, re);
    }
    matched
}

/// Kubernetes DNS-1035 label check (`[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters),
/// as `k8s.io/apimachinery/pkg/util/validation.IsDNS1035Label`.
pub(crate) fn dns1035_label(value: &str) -> Option<String> {
    if value.len() > 63 {
        return Some("must be no more than 63 characters".to_owned());
    }
    if !matches_pattern(value, "^[a-z]([-a-z0-9]*[a-z0-9])?$") {
        return Some(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
             with an alphabetic character, and end with an alphanumeric character"
                .to_owned(),
        );
    }
    None
}

/// Renders a JSON path segment for a map key.
pub(crate) fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// Renders a JSON path segment for a list index.
pub(crate) fn idx(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Schema of a free-form JSON field: any value, kept as is by the API server
/// (`x-kubernetes-preserve-unknown-fields`), like Go's `apiextensionsv1.JSON`.
pub(crate) fn preserve_unknown_fields(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Drops the `default` that schemars derives from `#[serde(default)]`, for fields the Go
/// schema gives no default.
pub(crate) fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

#[cfg(test)]
mod tests;
