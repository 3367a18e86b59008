//! The soak scenario's records and verdict: what each request ended as, the router process
//! probed over time (RSS, open files, in-flight work), latency per window, and the checks
//! that fail the soak (RSS growth after the warm-up, counters left non-zero, a panic).
//!
//! The runner (the `kthena-bench` binary, `--scenario soak`) fills a [`SoakRun`]; everything
//! here is deterministic and tested.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// How one request ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Outcome {
    /// 200 and a complete answer (`data: [DONE]` for streams).
    Ok,
    /// The client gave up on purpose (one of the random aborts).
    Aborted,
    /// A status other than 200.
    Status(u16),
    /// A 200 stream that ended with an error event or without `[DONE]`.
    StreamError,
    /// No response: the connection failed.
    Transport,
}

impl Outcome {
    /// The kind's name in the report: `ok`, `client_abort`, `http_503`, `stream_error`,
    /// `transport`.
    #[must_use]
    pub fn kind(self) -> String {
        match self {
            Self::Ok => "ok".to_owned(),
            Self::Aborted => "client_abort".to_owned(),
            Self::Status(s) => format!("http_{s}"),
            Self::StreamError => "stream_error".to_owned(),
            Self::Transport => "transport".to_owned(),
        }
    }
}

/// One request: when it started (s from the start of the load), its latency to the last
/// byte (ms) and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Start, seconds from the start of the load.
    pub at_s: f64,
    /// Time from the send to the last byte (or the abort), ms.
    pub latency_ms: f64,
    /// Whether it streamed.
    pub stream: bool,
    /// How it ended.
    pub outcome: Outcome,
}

/// One probe of the router process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Seconds from the start of the load.
    pub at_s: f64,
    /// Resident set size (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Open file descriptors (entries of `/proc/PID/fd`).
    pub fds: u64,
    /// Sum of the router's `kthena_router_active_*` gauges at that moment.
    pub in_flight: u64,
    /// `kthena_router_kv_index_entries`: entries of the KV index.
    pub kv_index_entries: u64,
}

/// Latency of the successful requests that started in one window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Window start, minutes from the start of the load.
    pub start_min: f64,
    /// Requests started in the window (all outcomes).
    pub requests: usize,
    /// Of which ended [`Outcome::Ok`].
    pub ok: usize,
    /// Median latency of the ok ones, ms.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank) of the ok ones, ms.
    pub p99_ms: f64,
}

/// The `q` quantile (0..1) of `sorted` by nearest rank; 0 for an empty slice.
#[must_use]
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Splits `records` into windows of `window_s` seconds by start time.
#[must_use]
pub fn windows(records: &[Record], window_s: f64, duration_s: f64) -> Vec<Window> {
    let n = (duration_s / window_s).ceil().max(1.0) as usize;
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut counts = vec![0usize; n];
    for r in records {
        let i = ((r.at_s / window_s) as usize).min(n - 1);
        counts[i] += 1;
        if r.outcome == Outcome::Ok {
            lat[i].push(r.latency_ms);
        }
    }
    lat.iter_mut()
        .zip(counts)
        .enumerate()
        .map(|(i, (l, requests))| {
            l.sort_by(f64::total_cmp);
            Window {
                start_min: i as f64 * window_s / 60.0,
                requests,
                ok: l.len(),
                p50_ms: quantile(l, 0.5),
                p99_ms: quantile(l, 0.99),
            }
        })
        .collect()
}

/// RSS after the warm-up against RSS at the end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RssGrowth {
    /// Mean RSS of the probes in the first fifth after the warm-up, KiB.
    pub after_warmup_kib: f64,
    /// Mean RSS of the probes in the last fifth of the run, KiB.
    pub end_kib: f64,
    /// Highest RSS seen after the warm-up, KiB.
    pub max_kib: u64,
}

impl RssGrowth {
    /// Growth from after the warm-up to the end, as a ratio (0.05 = 5 %).
    #[must_use]
    pub fn ratio(&self) -> f64 {
        if self.after_warmup_kib > 0.0 {
            self.end_kib / self.after_warmup_kib - 1.0
        } else {
            0.0
        }
    }

    /// Whether RSS grew: the end is more than `tolerance` (ratio) and 4 MiB above the level
    /// right after the warm-up (allocator noise on a steady load stays well below both).
    #[must_use]
    pub fn grew(&self, tolerance: f64) -> bool {
        self.ratio() > tolerance && self.end_kib - self.after_warmup_kib > 4096.0
    }
}

/// Compares the first fifth of the probes after `warmup_s` with the last fifth; `None` with
/// fewer than 5 probes after the warm-up.
#[must_use]
pub fn rss_growth(probes: &[Probe], warmup_s: f64) -> Option<RssGrowth> {
    let after: Vec<&Probe> = probes.iter().filter(|p| p.at_s >= warmup_s).collect();
    if after.len() < 5 {
        return None;
    }
    let fifth = after.len() / 5;
    let mean = |ps: &[&Probe]| ps.iter().map(|p| p.rss_kib as f64).sum::<f64>() / ps.len() as f64;
    Some(RssGrowth {
        after_warmup_kib: mean(&after[..fifth]),
        end_kib: mean(&after[after.len() - fifth..]),
        max_kib: after.iter().map(|p| p.rss_kib).max().unwrap_or(0),
    })
}

/// Everything one soak measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SoakRun {
    /// Load duration, s.
    pub duration_s: f64,
    /// Warm-up excluded from the RSS check, s.
    pub warmup_s: f64,
    /// Offered rate, requests per second.
    pub rate: f64,
    /// Every request.
    pub records: Vec<Record>,
    /// Every probe of the router process.
    pub probes: Vec<Probe>,
    /// Non-zero in-flight counters left 15 s after the load stopped (`name=value`, from
    /// `/debug/config_dump/pods` and `/metrics`); empty when all are zero.
    pub leaked: Vec<String>,
    /// Lines of the router's stderr that report a panic.
    pub panics: Vec<String>,
    /// Whether the router process was still running at the end.
    pub router_alive: bool,
    /// Engine fault phases applied, as `minute: engine fault` lines.
    pub faults: Vec<String>,
}

/// Allowed RSS growth after the warm-up (ratio).
pub const RSS_TOLERANCE: f64 = 0.10;

/// Length of a latency window, s (5 minutes).
pub const WINDOW_S: f64 = 300.0;

impl SoakRun {
    /// Request counts by [`Outcome::kind`].
    #[must_use]
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in &self.records {
            *m.entry(r.outcome.kind()).or_insert(0) += 1;
        }
        m
    }

    /// The reasons the soak fails; empty when it passes.
    #[must_use]
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        match rss_growth(&self.probes, self.warmup_s) {
            Some(g) if g.grew(RSS_TOLERANCE) => f.push(format!(
                "RSS grew {:.1} % after the warm-up ({:.1} -> {:.1} MiB)",
                g.ratio() * 100.0,
                g.after_warmup_kib / 1024.0,
                g.end_kib / 1024.0
            )),
            Some(_) => {}
            None => f.push("too few RSS probes after the warm-up".to_owned()),
        }
        if !self.leaked.is_empty() {
            f.push(format!(
                "counters not zero at the end: {}",
                self.leaked.join(", ")
            ));
        }
        if !self.panics.is_empty() {
            f.push(format!("the router panicked: {}", self.panics.join(" | ")));
        }
        if !self.router_alive {
            f.push("the router process exited".to_owned());
        }
        f
    }

    /// The markdown report: totals, errors by kind, the process over time, latency per
    /// window, the verdict.
    #[must_use]
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let ok = self.counts().get("ok").copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "Soak: {:.0} min at {} req/s offered, {} requests ({} ok), warm-up {:.0} min.\n",
            self.duration_s / 60.0,
            self.rate,
            self.records.len(),
            ok,
            self.warmup_s / 60.0
        );
        s.push_str("| outcome | requests |\n|---|---|\n");
        for (k, n) in self.counts() {
            let _ = writeln!(s, "| {k} | {n} |");
        }
        s.push_str(
            "\n| window (min) | requests | ok | p50 (ms) | p99 (ms) |\n|---|---|---|---|---|\n",
        );
        for w in windows(&self.records, WINDOW_S, self.duration_s) {
            let _ = writeln!(
                s,
                "| {:.0}-{:.0} | {} | {} | {:.1} | {:.1} |",
                w.start_min,
                w.start_min + WINDOW_S / 60.0,
                w.requests,
                w.ok,
                w.p50_ms,
                w.p99_ms
            );
        }
        self.process_table(&mut s);
        let failures = self.failures();
        if failures.is_empty() {
            s.push_str("\nVerdict: PASS (flat RSS, zero counters at the end, no panic).\n");
        } else {
            let _ = writeln!(s, "\nVerdict: FAIL: {}.", failures.join("; "));
        }
        s
    }

    fn process_table(&self, s: &mut String) {
        s.push_str("\n| router process | value |\n|---|---|\n");
        if let Some(g) = rss_growth(&self.probes, self.warmup_s) {
            let _ = writeln!(
                s,
                "| RSS after warm-up / at the end / max (MiB) | {:.1} / {:.1} / {:.1} ({:+.1} %) |",
                g.after_warmup_kib / 1024.0,
                g.end_kib / 1024.0,
                g.max_kib as f64 / 1024.0,
                g.ratio() * 100.0
            );
        }
        let fds = self.probes.iter().map(|p| p.fds);
        let _ = writeln!(
            s,
            "| open fds min / max / last | {} / {} / {} |",
            fds.clone().min().unwrap_or(0),
            fds.clone().max().unwrap_or(0),
            self.probes.last().map_or(0, |p| p.fds)
        );
        let leaked = if self.leaked.is_empty() {
            "all 0".to_owned()
        } else {
            self.leaked.join(", ")
        };
        let _ = writeln!(s, "| in-flight counters at the end | {leaked} |");
        let kv = self.probes.iter().map(|p| p.kv_index_entries);
        let _ = writeln!(
            s,
            "| KV index entries max / last | {} / {} |",
            kv.clone().max().unwrap_or(0),
            self.probes.last().map_or(0, |p| p.kv_index_entries)
        );
        let _ = writeln!(s, "| panics in the router log | {} |", self.panics.len());
    }
}

#[cfg(test)]
mod tests;
