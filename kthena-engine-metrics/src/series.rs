//! Every series of one gauge or counter family with its labels, for readers that need the
//! value per label (the autoscaler reading a router's per-ModelServer gauges) rather than
//! [`family`](crate::family)'s sum.

use std::collections::BTreeMap;

/// One series: its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Label name → value (escapes `\\`, `\"`, `\n` resolved).
    pub labels: BTreeMap<String, String>,
    /// The sample value (`NaN`, `+Inf`, `-Inf` as written).
    pub value: f64,
}

/// The series of `family` in `text` (Prometheus text format or OpenMetrics), in the
/// answer's order: the samples named `family` (a counter also `{family}_total`). `Some(vec![])`
/// when the text has no such family; `None` when the text is not metrics text (a line that
/// is neither a comment nor a sample, labels that do not close).
pub fn series(text: &str, family: &str) -> Option<Vec<Series>> {
    let total = format!("{family}_total");
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, labels, value) = sample(line)?;
        if name == family || name == total {
            out.push(Series { labels, value });
        }
    }
    Some(out)
}

/// `name{labels} value [timestamp]`, labels parsed with their quoting.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    let end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..end];
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if !valid {
        return None;
    }
    let mut rest = &line[end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = parse_labels(inner, &mut labels)?;
    }
    let value = match rest.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

/// Reads `k="v",...}` from `s` into `labels`; the text after the closing brace.
fn parse_labels<'a>(mut s: &'a str, labels: &mut BTreeMap<String, String>) -> Option<&'a str> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Some(after);
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim();
        if key.is_empty() {
            return None;
        }
        let mut chars = s[eq + 1..].trim_start().char_indices();
        let body = s[eq + 1..].trim_start();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let close = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.to_owned(), value);
        s = body[close + 1..].trim_start();
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

#[cfg(test)]
mod tests;
