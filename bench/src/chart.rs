//! PNG bar charts of a scenario's results (`plotters`, bitmap backend).
//!
//! Labels need a TrueType font; the chart looks for DejaVu Sans or Liberation Sans in the
//! usual system folders and draws bars without text when none is found.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::report::PolicyResult;

/// Reads one plotted value of a row.
type Metric = fn(&PolicyResult) -> f64;

/// Why a chart was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The results hold no row of the scenario asked for.
    #[error("no results for scenario {0:?}")]
    NoResults(String),
    /// The soak recorded no probes.
    #[error("no probes to draw")]
    NoProbes,
    /// plotters failed (the PNG cannot be written, a font cannot be rendered).
    #[error("drawing failed: {0}")]
    Draw(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// `map_err` of every plotters call.
fn draw_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> ChartError {
    ChartError::Draw(Box::new(e))
}

/// The colours of the bars, in policy order.
const COLORS: [RGBColor; 8] = [
    RGBColor(150, 150, 150),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers a system font as `sans-serif` once; returns whether one was found.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                // The font must live as long as the process: plotters keeps a reference.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// Draws throughput (req/s) and mean TTFT (s) per policy of one scenario, side by side, into
/// a PNG at `path`.
///
/// # Errors
/// [`ChartError::NoResults`] when `rows` hold nothing of `scenario`, [`ChartError::Draw`]
/// when the file cannot be written.
pub fn draw_scenario(path: &Path, scenario: &str, rows: &[PolicyResult]) -> Result<(), ChartError> {
    let rows: Vec<&PolicyResult> = rows.iter().filter(|r| r.scenario == scenario).collect();
    if rows.is_empty() {
        return Err(ChartError::NoResults(scenario.to_owned()));
    }
    let text = font_ready();
    let root = BitMapBackend::new(path, (1400, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let root = if text {
        root.titled(
            &format!("kthena-bench: {scenario} scenario (3 simulated engines, model seconds)"),
            ("sans-serif", 24),
        )
        .map_err(draw_err)?
    } else {
        root
    };
    let panels = root.split_evenly((1, 2));
    let metrics: [(&str, Metric); 2] = [
        ("throughput (req/s, higher is better)", |r| r.throughput_rps),
        ("mean TTFT (s, lower is better)", |r| r.ttft_mean_s),
    ];
    for (panel, (title, value)) in panels.iter().zip(metrics) {
        draw_bars(panel, title, &rows, value, text)?;
    }
    root.present().map_err(draw_err)?;
    Ok(())
}

/// One panel of [`draw_scenario`]: a bar per row of `value`, labelled when `text`.
fn draw_bars(
    panel: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    rows: &[&PolicyResult],
    value: Metric,
    text: bool,
) -> Result<(), ChartError> {
    let max = rows.iter().map(|r| value(r)).fold(0.0f64, f64::max);
    let top = if max > 0.0 { max * 1.15 } else { 1.0 };
    let n = rows.len();
    let mut builder = ChartBuilder::on(panel);
    builder.margin(12);
    if text {
        builder
            .caption(title, ("sans-serif", 18))
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut chart = builder
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(draw_err)?;
    if text {
        let names: Vec<String> = rows.iter().map(|r| short_name(&r.policy)).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor();
                if (x - i - 0.5).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_label_style(("sans-serif", 13))
            .draw()
            .map_err(draw_err)?;
    }
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let c = COLORS[i % COLORS.len()];
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, value(r))],
                c.filled(),
            )
        }))
        .map_err(draw_err)?;
    if text {
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                Text::new(
                    format!("{:.2}", value(r)),
                    (i as f64 + 0.2, value(r) + top * 0.02),
                    ("sans-serif", 14),
                )
            }))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// A policy name short enough for an axis label (`LR` = least-request, `KV` =
/// kvcache-aware).
fn short_name(policy: &str) -> String {
    if policy.starts_with("best") {
        return "best".to_owned();
    }
    if policy.starts_with("direct") {
        return "direct/1 eng".to_owned();
    }
    if policy == crate::scenario::CHART_DEFAULT {
        return "chart".to_owned();
    }
    policy
        .replace("least-request", "LR")
        .replace("kvcache-aware", "KV")
        .replace("prefix-cache", "prefix")
        .replace("least-latency", "latency")
        .replace("gpu-usage", "gpu")
}

/// Draws the soak's router RSS (MiB) over time and the p99 latency (ms) of each window,
/// side by side, into a PNG at `path`.
///
/// # Errors
/// [`ChartError::NoProbes`] without probes, [`ChartError::Draw`] when the file cannot be
/// written.
pub fn draw_soak(
    path: &Path,
    probes: &[crate::soak::Probe],
    windows: &[crate::soak::Window],
) -> Result<(), ChartError> {
    if probes.is_empty() {
        return Err(ChartError::NoProbes);
    }
    let text = font_ready();
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let panels = root.split_evenly((1, 2));
    let rss: Vec<(f64, f64)> = probes
        .iter()
        .map(|p| (p.at_s / 60.0, p.rss_kib as f64 / 1024.0))
        .collect();
    let p99: Vec<(f64, f64)> = windows
        .iter()
        .map(|w| (w.start_min + crate::soak::WINDOW_S / 120.0, w.p99_ms))
        .collect();
    let end = rss.iter().chain(&p99).map(|p| p.0).fold(1.0f64, f64::max);
    let series = [
        (
            "router RSS (MiB) over time (min)",
            rss,
            RGBColor(31, 119, 180),
        ),
        (
            "p99 latency (ms) per 5-minute window",
            p99,
            RGBColor(214, 39, 40),
        ),
    ];
    for (panel, (title, points, color)) in panels.iter().zip(series) {
        let top = points.iter().map(|p| p.1).fold(0.0f64, f64::max) * 1.15;
        let mut builder = ChartBuilder::on(panel);
        builder.margin(16);
        if text {
            builder
                .caption(title, ("sans-serif", 18))
                .x_label_area_size(36)
                .y_label_area_size(60);
        }
        let mut chart = builder
            .build_cartesian_2d(0f64..end, 0f64..top.max(1.0))
            .map_err(draw_err)?;
        if text {
            chart
                .configure_mesh()
                .x_desc("minutes")
                .draw()
                .map_err(draw_err)?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                points.clone(),
                color.stroke_width(2),
            )))
            .map_err(draw_err)?;
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)?;
    Ok(())
}
