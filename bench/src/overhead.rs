//! Router overhead: the same open-loop load sent straight to the engines and through each
//! proxy, with an engine profile that takes no time, so the difference is the proxy's.
//!
//! Engines: three kthena-sim servers in this process (their own runtime). Contenders: each
//! proxy of [`Peer::ALL`] that is installed, started as its own process in turn. Load: a
//! fixed-rate, latency-corrected generator in its own process ([`loadgen`]). For every
//! contender and point the direct run comes right before the proxied one, so each added
//! latency is a difference within the same minute of the same run. With several repeats the
//! contenders take turns: each round starts every contender once and measures each point
//! once, so a slow stretch of the machine falls on one pair of every contender's cells
//! instead of on all pairs of one contender's.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::harness::{self, Runtimes};
use crate::loadgen::{self, Measured, Spec};
use crate::peers::{self, Peer};

/// The simulated engines' time scale in overhead mode: a 6 ms decode step lasts 6 ns of wall
/// time, so an engine answers as fast as its HTTP stack allows.
pub(crate) const ZERO_LATENCY_TIME_SCALE: f64 = 1e6;

/// One measured point of one contender.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cell {
    /// Offered rate, requests per second.
    pub(crate) rate: f64,
    /// Whether responses were streamed.
    pub(crate) stream: bool,
    /// Straight to the engines (round-robin): the medians over every direct run of this
    /// point in the run, those of all contenders' pairs (the same load on the same engines).
    pub(crate) direct: Measured,
    /// Through the proxy (medians over its pairs).
    pub(crate) proxy: Measured,
    /// `proxy.p50_us − direct.p50_us`, microseconds.
    pub(crate) added_p50_us: f64,
    /// `proxy.p99_us − direct.p99_us`, microseconds.
    pub(crate) added_p99_us: f64,
    /// The median over the pairs of each pair's proxy p99 − direct p99, microseconds (the
    /// estimate before the direct runs were pooled; a stall in either run of a pair moves it).
    pub(crate) paired_added_p99_us: f64,
    /// CPU time of the proxy (user + system, with its worker processes) per answered
    /// request of its runs (warm-up included), microseconds (the median over the repeats; 10 ms clock-tick resolution
    /// over the whole run).
    pub(crate) cpu_us_per_request: f64,
    /// Direct/proxy pairs measured; each percentile above is the median over them.
    pub(crate) repeats: usize,
}

/// One contender's results.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// The contender (program and policy).
    pub(crate) proxy: String,
    /// Its points, in the order asked.
    pub(crate) cells: Vec<Cell>,
    /// Resident memory after the last point, MiB (with its worker processes).
    pub(crate) rss_mib: f64,
    /// The anonymous part of `rss_mib` (heap and stacks, without file-backed code pages), MiB.
    pub(crate) rss_anon_mib: f64,
}

/// The measured points: each rate non-streaming and streaming.
pub(crate) fn points(rates: &[f64]) -> Vec<(f64, bool)> {
    rates
        .iter()
        .flat_map(|&r| [(r, false), (r, true)])
        .collect()
}

/// Runs the comparison (see the module doc); `only` limits the contenders (empty: all
/// installed ones).
///
/// # Errors
/// The engines cannot start, or a load generator fails.
pub(crate) async fn run(
    rt: &Runtimes,
    points: &[(f64, bool)],
    load: Load,
    only: &[String],
) -> anyhow::Result<Vec<Row>> {
    let cfg = kthena_sim::Config::default()
        .with_model(harness::MODEL)
        .with_time_scale(ZERO_LATENCY_TIME_SCALE);
    let sims = harness::start_sims(rt, 3, cfg).await?;
    let result = run_on(&sims, points, load, only).await;
    harness::stop_sims(rt, sims).await;
    result
}

/// How long each point runs and how often.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Wall seconds per run.
    pub(crate) seconds: f64,
    /// Direct/proxy pairs per point (at least 1); the cells are medians over them.
    pub(crate) repeats: usize,
}

async fn run_on(
    sims: &[kthena_sim::SimHandle],
    points: &[(f64, bool)],
    load: Load,
    only: &[String],
) -> anyhow::Result<Vec<Row>> {
    let client = harness::http_client();
    let direct: Vec<String> = sims.iter().map(kthena_sim::SimHandle::base_url).collect();
    let contenders = contenders(only);
    // Per contender: the pairs of each point, and its memory after its last point.
    let mut pairs: Vec<Vec<Vec<Pair>>> = vec![vec![Vec::new(); points.len()]; contenders.len()];
    let mut rss = vec![(0.0, 0.0); contenders.len()];
    for round in 1..=load.repeats.max(1) {
        for (i, (peer, program)) in contenders.iter().enumerate() {
            let running = match peers::start(*peer, program, sims, &client).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(peer = peer.label(), round, error = %format!("{e:#}"), "Not started, skipped");
                    continue;
                }
            };
            for (j, &(rate, stream)) in points.iter().enumerate() {
                let pair = measure_pair(&direct, &running, rate, stream, load.seconds).await?;
                tracing::info!(
                    peer = peer.label(),
                    round,
                    rate,
                    stream,
                    direct_p50_us = pair.direct.p50_us,
                    direct_p99_us = pair.direct.p99_us,
                    proxy_p50_us = pair.proxy.p50_us,
                    proxy_p99_us = pair.proxy.p99_us,
                    achieved_rps = pair.proxy.achieved_rps,
                    failed = pair.proxy.failed,
                    cpu_us_per_request = pair.cpu_us_per_request,
                    "Point measured"
                );
                pairs[i][j].push(pair);
            }
            const MIB: f64 = 1024.0 * 1024.0;
            rss[i] = (
                running.rss_bytes() as f64 / MIB,
                running.rss_anon_bytes() as f64 / MIB,
            );
            drop(running);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let direct = pooled_direct(&pairs, points.len());
    let rows = contenders
        .iter()
        .zip(pairs)
        .zip(rss)
        .filter(|((_, p), _)| p.iter().all(|point| !point.is_empty()))
        .map(|(((peer, _), p), (rss_mib, rss_anon_mib))| Row {
            proxy: peer.label().to_owned(),
            cells: points
                .iter()
                .zip(&p)
                .zip(&direct)
                .map(|((&(rate, stream), pairs), direct)| {
                    Cell::of(rate, stream, pairs, direct.clone())
                })
                .collect(),
            rss_mib,
            rss_anon_mib,
        })
        .collect();
    Ok(rows)
}

/// Per point, the medians over the direct runs of every contender's pairs (`pairs[contender]
/// [point]`). The direct runs are the same experiment for every contender: pooled, a run that
/// hit a stall of the machine (10-20% of them had a p99 of 4-20 ms) is outvoted, where in a
/// pair it moved that pair's added latency by as much.
fn pooled_direct(pairs: &[Vec<Vec<Pair>>], points: usize) -> Vec<Measured> {
    (0..points)
        .map(|j| {
            let runs: Vec<Measured> = pairs
                .iter()
                .flat_map(|p| p[j].iter().map(|pair| pair.direct.clone()))
                .collect();
            Measured::median_of(&runs)
        })
        .collect()
}

/// The installed contenders of [`Peer::ALL`] whose label starts with one of `only` (all of
/// them when `only` is empty), with their programs.
fn contenders(only: &[String]) -> Vec<(Peer, std::path::PathBuf)> {
    Peer::ALL
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|o| p.label().starts_with(o.as_str())))
        .filter_map(|peer| {
            let program = peer.program();
            if program.is_none() {
                tracing::info!(peer = peer.label(), "Not installed, skipped");
            }
            Some((peer, program?))
        })
        .collect()
}

/// One direct run followed by one proxied run of the same load.
#[derive(Debug, Clone)]
struct Pair {
    direct: Measured,
    proxy: Measured,
    /// The proxy's CPU time per answered request of its run, microseconds.
    cpu_us_per_request: f64,
}

/// One direct run, then the same load through `running`.
///
/// # Errors
/// A load generator fails.
async fn measure_pair(
    direct: &[String],
    running: &peers::Running,
    rate: f64,
    stream: bool,
    seconds: f64,
) -> anyhow::Result<Pair> {
    let spec = |targets: Vec<String>| Spec {
        targets,
        stream,
        rate,
        seconds,
    };
    let d = loadgen::measure(&spec(direct.to_vec())).await?;
    let before = running.cpu_seconds();
    let p = loadgen::measure(&spec(vec![running.url.clone()])).await?;
    let used = running.cpu_seconds() - before;
    // Per answered request: a proxy that sheds load does not look cheaper for it.
    let answered = (p.sent - p.failed.min(p.sent) + loadgen::WARM_REQUESTS) as f64;
    Ok(Pair {
        direct: d,
        proxy: p,
        cpu_us_per_request: used * 1e6 / answered,
    })
}

impl Cell {
    /// One point of one contender: the medians over its `pairs` (not empty) against
    /// `direct`, the pooled direct runs of the point.
    fn of(rate: f64, stream: bool, pairs: &[Pair], direct: Measured) -> Self {
        let median = kthena_bench::report::median;
        let each = |f: fn(&Pair) -> f64| median(&pairs.iter().map(f).collect::<Vec<_>>());
        let proxy: Vec<Measured> = pairs.iter().map(|p| p.proxy.clone()).collect();
        let proxy = Measured::median_of(&proxy);
        Self {
            rate,
            stream,
            added_p50_us: proxy.p50_us - direct.p50_us,
            added_p99_us: proxy.p99_us - direct.p99_us,
            paired_added_p99_us: each(|p| p.proxy.p99_us - p.direct.p99_us),
            cpu_us_per_request: each(|p| p.cpu_us_per_request),
            repeats: pairs.len(),
            direct,
            proxy,
        }
    }
}

/// A markdown table's header: `title`, one column per point, then `last` if any.
fn header(title: &str, cells: &[Cell], last: Option<&str>) -> String {
    let mut s = format!("| {title} |");
    for c in cells {
        let kind = if c.stream { "stream" } else { "non-stream" };
        let _ = write!(s, " {:.0}k req/s {kind} |", c.rate / 1000.0);
    }
    if let Some(l) = last {
        let _ = write!(s, " {l} |");
    }
    s.push_str("\n|---|");
    for _ in 0..cells.len() + usize::from(last.is_some()) {
        s.push_str("---|");
    }
    s.push('\n');
    s
}

/// The markdown table: added p50 / p99 over direct per point, and RSS. A point where the
/// proxy fell behind (below 97% of the offered rate) or failed requests says so.
pub(crate) fn table(rows: &[Row]) -> String {
    let Some(first) = rows.first() else {
        return "no contender was installed\n".to_owned();
    };
    let mut s = header(
        "added latency, µs (p50 / p99)",
        &first.cells,
        Some("RSS MiB (anonymous)"),
    );
    for r in rows {
        let _ = write!(s, "| {} |", r.proxy);
        for c in &r.cells {
            let _ = write!(s, " {:.0} / {:.0}", c.added_p50_us, c.added_p99_us);
            if c.proxy.achieved_rps < 0.97 * c.rate {
                let _ = write!(s, " (falls behind: {:.0} req/s)", c.proxy.achieved_rps);
            }
            if c.proxy.failed > 0 {
                let _ = write!(s, " ({} failed)", c.proxy.failed);
            }
            s.push_str(" |");
        }
        let _ = writeln!(s, " {:.0} ({:.0}) |", r.rss_mib, r.rss_anon_mib);
    }
    s.push('\n');
    s.push_str(&header("proxy CPU per request, µs", &first.cells, None));
    for r in rows {
        let _ = write!(s, "| {} |", r.proxy);
        for c in &r.cells {
            let _ = write!(s, " {:.0} |", c.cpu_us_per_request);
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests;
