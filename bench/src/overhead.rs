//! Router overhead: the same open-loop load sent straight to the engines and through each
//! proxy, with an engine profile that takes no time, so the difference is the proxy's.
//!
//! Engines: three kthena-sim servers in this process (their own runtime). Contenders: each
//! proxy of [`Peer::ALL`] that is installed, started as its own process in turn. Load: a
//! fixed-rate, latency-corrected generator in its own process ([`loadgen`]). For every
//! contender and point the direct run comes right before the proxied one, so each added
//! latency is a difference within the same minute of the same run.

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
    /// Straight to the engines (round-robin), just before.
    pub(crate) direct: Measured,
    /// Through the proxy.
    pub(crate) proxy: Measured,
    /// Proxy p50 − direct p50, microseconds.
    pub(crate) added_p50_us: f64,
    /// Proxy p99 − direct p99, microseconds.
    pub(crate) added_p99_us: f64,
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
    seconds: f64,
    only: &[String],
) -> anyhow::Result<Vec<Row>> {
    let cfg = kthena_sim::Config::default()
        .with_model(harness::MODEL)
        .with_time_scale(ZERO_LATENCY_TIME_SCALE);
    let sims = harness::start_sims(rt, 3, cfg).await?;
    let result = run_on(&sims, points, seconds, only).await;
    harness::stop_sims(rt, sims).await;
    result
}

async fn run_on(
    sims: &[kthena_sim::SimHandle],
    points: &[(f64, bool)],
    seconds: f64,
    only: &[String],
) -> anyhow::Result<Vec<Row>> {
    let client = harness::http_client();
    let direct: Vec<String> = sims.iter().map(kthena_sim::SimHandle::base_url).collect();
    let mut rows = Vec::new();
    for peer in Peer::ALL {
        if !only.is_empty() && !only.iter().any(|o| peer.label().starts_with(o.as_str())) {
            continue;
        }
        let Some(program) = peer.program() else {
            tracing::info!(peer = peer.label(), "Not installed, skipped");
            continue;
        };
        let running = match peers::start(peer, &program, sims, &client).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(peer = peer.label(), error = %format!("{e:#}"), "Not started, skipped");
                continue;
            }
        };
        let mut cells = Vec::new();
        for &(rate, stream) in points {
            let spec = |targets: Vec<String>| Spec {
                targets,
                stream,
                rate,
                seconds,
            };
            let d = loadgen::measure(&spec(direct.clone())).await?;
            let p = loadgen::measure(&spec(vec![running.url.clone()])).await?;
            tracing::info!(
                peer = peer.label(),
                rate,
                stream,
                direct_p50_us = d.p50_us,
                direct_p99_us = d.p99_us,
                proxy_p50_us = p.p50_us,
                proxy_p99_us = p.p99_us,
                achieved_rps = p.achieved_rps,
                failed = p.failed,
                "Point measured"
            );
            cells.push(Cell {
                rate,
                stream,
                added_p50_us: p.p50_us - d.p50_us,
                added_p99_us: p.p99_us - d.p99_us,
                direct: d,
                proxy: p,
            });
        }
        let rss_mib = running.rss_bytes() as f64 / (1024.0 * 1024.0);
        drop(running);
        tokio::time::sleep(Duration::from_millis(200)).await;
        rows.push(Row {
            proxy: peer.label().to_owned(),
            cells,
            rss_mib,
        });
    }
    Ok(rows)
}

/// The markdown table: added p50 / p99 over direct per point, and RSS. A point where the
/// proxy fell behind (below 97% of the offered rate) or failed requests says so.
pub(crate) fn table(rows: &[Row]) -> String {
    let Some(first) = rows.first() else {
        return "no contender was installed\n".to_owned();
    };
    let mut s = String::from("| added latency, µs (p50 / p99) |");
    for c in &first.cells {
        let _ = write!(
            s,
            " {:.0}k req/s {} |",
            c.rate / 1000.0,
            if c.stream { "stream" } else { "non-stream" }
        );
    }
    s.push_str(" RSS MiB |\n|---|");
    for _ in &first.cells {
        s.push_str("---|");
    }
    s.push_str("---|\n");
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
        let _ = writeln!(s, " {:.0} |", r.rss_mib);
    }
    s
}
