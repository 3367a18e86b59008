//! Reading one metric family out of an engine's Prometheus text answer (Go
//! `metric_collector.go`: counters and gauges summed over their series, histograms as the
//! first series' cumulative buckets). A sample value of the family that
//! `kthena_autoscale::check_sample` refuses (NaN, ±Inf, negative, above 1e15) makes the whole
//! family [`FamilyValue::Invalid`].

use kthena_autoscale::{Histogram, InvalidSample, check_sample};

/// One family's value in one scrape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FamilyValue {
    /// Counter, gauge or untyped: the sum over all series.
    Scalar(f64),
    /// The first series of a histogram.
    Histogram(Histogram),
    /// A sample of the family (the first such) is no usable value: its value and why.
    Invalid(f64, InvalidSample),
}

/// The samples of `family` in `text` (Prometheus text format or OpenMetrics): `None` when the
/// text has no such family, or is not metrics text at all.
pub(crate) fn family(text: &str, family: &str) -> Option<FamilyValue> {
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
            if let Err(why) = check_sample(value) {
                return Some(FamilyValue::Invalid(value, why));
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
            if let Err(why) = check_sample(value) {
                return Some(FamilyValue::Invalid(value, why));
            }
            sum += value;
            found = true;
        }
    }
    if kind.as_deref() == Some("histogram") {
        return Some(FamilyValue::Histogram(Histogram::new(
            count?, hsum, buckets,
        )));
    }
    found.then_some(FamilyValue::Scalar(sum))
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
