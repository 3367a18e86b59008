//! The fixed-rate load generator of the overhead measurement, run as its own process
//! (`kthena-bench --load-gen <spec>`, started by [`measure`]) so that its work is scheduled
//! apart from the proxy under test and from the engines.
//!
//! Open loop: request `i` is due at `start + i / rate` whatever happened before, and its
//! latency is timed from that due time to its last byte (latency-corrected: a generator or
//! proxy that falls behind shows it in the percentiles instead of hiding it, the
//! "coordinated omission" correction of wrk2 and `oha --latency-correction`). A streamed
//! answer counts only when it ends with `data: [DONE]`.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kthena_bench::report::{median, percentile};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::harness::{self, HttpClient, MODEL};

/// Output tokens per overhead request.
const MAX_TOKENS: usize = 8;

/// Warm-up before every measured run: this rate for this long, not measured.
const WARM_RATE: f64 = 200.0;
const WARM_SECONDS: f64 = 0.5;

/// Requests of the warm-up (sent to the same targets right before the measured ones).
pub(crate) const WARM_REQUESTS: usize = (WARM_RATE * WARM_SECONDS) as usize;

/// What the generator process is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// Base URLs, used in turn (round-robin).
    pub(crate) targets: Vec<String>,
    /// Whether requests ask for a streamed (SSE) answer.
    pub(crate) stream: bool,
    /// Offered rate, requests per wall second.
    pub(crate) rate: f64,
    /// Length of the measured run, wall seconds.
    pub(crate) seconds: f64,
}

/// What the generator measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Measured {
    /// Completed requests per wall second.
    pub(crate) achieved_rps: f64,
    /// Requests sent.
    pub(crate) sent: usize,
    /// Requests that failed (no answer, a status other than 200, or a broken stream).
    pub(crate) failed: usize,
    /// Median latency, microseconds (from the due time to the last byte).
    pub(crate) p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub(crate) p99_us: f64,
}

impl Measured {
    /// Several runs of the same load in one: medians of the rate and the percentiles,
    /// sums of the sent and failed requests (all zero for no run).
    pub(crate) fn median_of(runs: &[Self]) -> Self {
        let m = |f: fn(&Self) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        Self {
            achieved_rps: m(|r| r.achieved_rps),
            sent: runs.iter().map(|r| r.sent).sum(),
            failed: runs.iter().map(|r| r.failed).sum(),
            p50_us: m(|r| r.p50_us),
            p99_us: m(|r| r.p99_us),
        }
    }
}

/// Runs `spec` in a child process of this binary and returns what it measured.
///
/// # Errors
/// The child cannot be started, fails, or prints no result.
pub(crate) async fn measure(spec: &Spec) -> anyhow::Result<Measured> {
    let exe = std::env::current_exe().context("finding the kthena-bench binary")?;
    let out = tokio::process::Command::new(exe)
        .arg("--load-gen")
        .arg(serde_json::to_string(spec)?)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("running the load generator")?;
    if !out.status.success() {
        anyhow::bail!(
            "load generator failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("reading the load generator's result")
}

/// The child's side: parses the spec, warms the connections up (0.5 s at 200 req/s, not
/// measured), runs the measured load and prints the result as JSON on stdout.
///
/// # Errors
/// An invalid spec or runtime.
pub(crate) fn child_main(spec: &str) -> anyhow::Result<()> {
    let spec: Spec = serde_json::from_str(spec).context("load generator spec")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let m = rt.block_on(async {
        let client = harness::http_client();
        let warm = Spec {
            rate: WARM_RATE,
            seconds: WARM_SECONDS,
            ..spec.clone()
        };
        let _ = run(&client, &warm).await;
        run(&client, &spec).await
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&m)?)?;
    Ok(())
}

/// Sends one request; `true` when it was answered 200 in full.
async fn one(client: &HttpClient, url: &str, body: Bytes, stream: bool) -> bool {
    let Ok(req) = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
    else {
        return false;
    };
    let Ok(resp) = client.request(req).await else {
        return false;
    };
    if resp.status() != http::StatusCode::OK {
        return false;
    }
    match resp.into_body().collect().await {
        Ok(b) => !stream || b.to_bytes().ends_with(b"data: [DONE]\n\n"),
        Err(_) => false,
    }
}

async fn run(client: &HttpClient, spec: &Spec) -> Measured {
    let n = (spec.rate * spec.seconds).round().max(1.0) as usize;
    let body = Bytes::from(
        serde_json::json!({
            "model": MODEL,
            "prompt": "Route this short request to the engine with the least load please.",
            "max_tokens": MAX_TOKENS,
            "stream": spec.stream,
        })
        .to_string(),
    );
    let urls: Vec<String> = spec
        .targets
        .iter()
        .map(|t| format!("{t}/v1/completions"))
        .collect();
    let start = Instant::now() + Duration::from_millis(20);
    let rate = spec_rate(spec.rate);
    let (due, mut due_rx) = tokio::sync::mpsc::unbounded_channel();
    // Without the thread nothing is sent, and every request counts as failed.
    let pacer = std::thread::Builder::new()
        .name("kthena-load-pacer".into())
        .spawn(move || pace(start, rate, n, &due));
    let mut tasks = JoinSet::new();
    while let Some((i, at)) = due_rx.recv().await {
        let url = urls[i % urls.len()].clone();
        let client = client.clone();
        let body = body.clone();
        let stream = spec.stream;
        tasks.spawn(async move {
            let ok = one(&client, &url, body, stream).await;
            let done = Instant::now();
            (ok, done - at, done)
        });
    }
    if let Ok(handle) = pacer {
        let _ = handle.join();
    }
    let mut lat = Vec::with_capacity(n);
    let mut failed = n - tasks.len();
    let mut end = start;
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((true, l, done)) => {
                lat.push(l.as_secs_f64() * 1e6);
                end = end.max(done);
            }
            _ => failed += 1,
        }
    }
    lat.sort_by(f64::total_cmp);
    let wall = (end - start).as_secs_f64();
    Measured {
        achieved_rps: if wall > 0.0 {
            lat.len() as f64 / wall
        } else {
            0.0
        },
        sent: n,
        failed,
        p50_us: percentile(&lat, 0.5),
        p99_us: percentile(&lat, 0.99),
    }
}

/// The due time of request `i` at `rate` requests per second from `start`.
fn due_at(start: Instant, rate: f64, i: usize) -> Instant {
    start + Duration::from_secs_f64(i as f64 / rate)
}

/// A positive, finite rate (requests per second); anything else is taken as 1.
fn spec_rate(rate: f64) -> f64 {
    if rate.is_finite() && rate > 0.0 {
        rate
    } else {
        1.0
    }
}

/// The pacer thread: hands each request index to the runtime at its due time, with the due
/// time to measure its latency from. A thread sleeping to each due time wakes within the
/// kernel's timer slack (about 50 µs), where the runtime's timer wheel would round every
/// due time up to its next 1 ms tick; that rounding is a phase fixed for a whole run at
/// 1,000 req/s, so two runs of the same load differed by up to 1 ms at every percentile.
/// A due time already past (the thread fell behind) is handed over at once.
fn pace(
    start: Instant,
    rate: f64,
    n: usize,
    due: &tokio::sync::mpsc::UnboundedSender<(usize, Instant)>,
) {
    for i in 0..n {
        let at = due_at(start, rate, i);
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        if due.send((i, at)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
