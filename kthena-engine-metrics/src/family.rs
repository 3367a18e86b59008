//! One metric family's value in a Prometheus text answer, as Go Kthena's autoscaler reads a
//! pod's metrics (`pkg/autoscaler/autoscaler/metric_collector.go`): counters and gauges summed
//! over their series, a histogram as its first series' samples.
//!
//! This reader is a line scanner of its own, not `prometheus-parse`: it reads OpenMetrics as
//! well (`# EOF`, counters declared without their `_total` suffix), and a line that is not a
//! sample makes the whole answer unreadable, as the autoscaler expects.

/// One family's value in one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Family<E> {
    /// Counter, gauge or untyped: the sum over all series.
    Scalar(f64),
    /// The first series of a histogram.
    Histogram(HistogramSamples),
    /// A sample of the family (the first such) that the caller's check refused: its value
    /// and the check's reason.
    Invalid(f64, E),
}

/// The samples of one histogram series, as they appear in the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSamples {
    /// `_count`.
    pub count: u64,
    /// `_sum` (0 when the series has none).
    pub sum: f64,
    /// `(le, cumulative count)` of each `_bucket` sample, in the answer's order (unsorted).
    pub buckets: Vec<(f64, u64)>,
}

/// The value of `family` in `text` (Prometheus text format or OpenMetrics): `None` when the
/// text has no such family (a histogram without `_count`, a bucket without `le`), or is not
/// metrics text at all (any line that is neither a comment nor a sample).
///
/// The family's kind comes from its `# TYPE` line (untyped without one): a counter also
/// matches `{family}_total`; a histogram reads the `_bucket`, `_count` and `_sum` samples of
/// the first series met (its labels without `le`). `check` sees every sample value of the
/// family, in order; the first it refuses ends the reading with [`Family::Invalid`].
pub fn family<T, E>(
    text: &str,
    family: &str,
    check: impl Fn(f64) -> Result<T, E>,
) -> Option<Family<E>> {
    let mut kind = None;
    let mut sum = 0.0;
    let mut found = false;
    let mut series: Option<String> = None;
    let mut buckets = Vec::new();
    let (mut count, mut hsum) = (None, 0.0);
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if it.next() == Some(family) {
                kind = it.next().map(str::to_owned);
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, labels, value) = sample(line)?;
        if kind.as_deref() == Some("histogram") {
            let Some(suffix) = name.strip_prefix(family) else {
                continue;
            };
            if let Err(why) = check(value) {
                return Some(Family::Invalid(value, why));
            }
            let key = strip_le(labels);
            if series.get_or_insert_with(|| key.clone()) != &key {
                continue;
            }
            match suffix {
                "_bucket" => buckets.push((le(labels)?, value as u64)),
                "_count" => count = Some(value as u64),
                "_sum" => hsum = value,
                _ => {}
            }
            continue;
        }
        if name == family
            || (kind.as_deref() == Some("counter") && name == format!("{family}_total"))
        {
            if let Err(why) = check(value) {
                return Some(Family::Invalid(value, why));
            }
            sum += value;
            found = true;
        }
    }
    if kind.as_deref() == Some("histogram") {
        return Some(Family::Histogram(HistogramSamples {
            count: count?,
            sum: hsum,
            buckets,
        }));
    }
    found.then_some(Family::Scalar(sum))
}

/// `name{labels} value [timestamp]` ⇒ (name, labels without braces, value). `None` for a line
/// that is not a sample (garbage).
fn sample(line: &str) -> Option<(&str, &str, f64)> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = open + line[open..].find('}')?;
            (&line[..open], &line[open + 1..close], &line[close + 1..])
        }
        None => {
            let end = line.find(char::is_whitespace)?;
            (&line[..end], "", &line[end..])
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    valid.then_some((name, labels, value))
}

/// The labels of a series without its `le` label (identifies a histogram series).
fn strip_le(labels: &str) -> String {
    labels
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("le="))
        .collect::<Vec<_>>()
        .join(",")
}

/// The `le` label's bound (`+Inf` included).
fn le(labels: &str) -> Option<f64> {
    let v = labels
        .split(',')
        .map(str::trim)
        .find_map(|l| l.strip_prefix("le="))?
        .trim_matches('"');
    match v {
        "+Inf" => Some(f64::INFINITY),
        v => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests;
