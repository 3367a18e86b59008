//! Router overhead: the same open-loop load sent straight to the engines and through the
//! router, with an engine profile that takes no time, so the difference is the router's.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kthena_bench::report::percentile;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::harness::{self, HttpClient, MODEL, Runtimes};

/// The simulated engines' time scale in overhead mode: a 6 ms decode step lasts 6 ns of wall
/// time, so an engine answers as fast as its HTTP stack allows.
pub(crate) const ZERO_LATENCY_TIME_SCALE: f64 = 1e6;

/// Output tokens per overhead request.
const MAX_TOKENS: usize = 8;

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Point {
    /// `direct` or `router`.
    pub(crate) path: String,
    /// Whether responses were streamed (SSE).
    pub(crate) stream: bool,
    /// Offered rate, requests per wall second.
    pub(crate) offered_rps: f64,
    /// Completed requests per wall second.
    pub(crate) achieved_rps: f64,
    /// Requests sent.
    pub(crate) sent: usize,
    /// Requests that failed.
    pub(crate) failed: usize,
    /// Latency percentiles, microseconds.
    pub(crate) p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub(crate) p99_us: f64,
}

/// An nginx round-robin proxy in front of the engines, the baseline of a plain L7 proxy.
/// Killed when dropped.
#[derive(Debug)]
struct Nginx {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    /// Asks the master for a fast shutdown (SIGTERM, which also stops its workers), waits up
    /// to 2 s, then kills it.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..200 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether an `nginx` binary can be run.
pub(crate) fn nginx_installed() -> bool {
    std::process::Command::new("nginx")
        .arg("-v")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts nginx (foreground, its own prefix folder) proxying round-robin to `engines` with
/// keep-alive upstream connections and no buffering, and waits until it accepts.
async fn start_nginx(engines: &[std::net::SocketAddr]) -> anyhow::Result<Nginx> {
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let d = dir.path().display();
    let servers: String = engines
        .iter()
        .map(|a| format!("    server {a};\n"))
        .collect();
    let conf = format!(
        "daemon off;\nworker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 16384; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         upstream engines {{\n{servers}    keepalive 512;\n  }}\n\
         server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://engines;\n\
         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n}}\n"
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let child = std::process::Command::new("nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let nginx = Nginx {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            anyhow::bail!("nginx did not listen on port {port} within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(nginx)
}

/// The overhead of the router over direct at one rate and mode.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Overhead {
    /// Offered rate, requests per second.
    pub(crate) rate: f64,
    /// Whether responses were streamed.
    pub(crate) stream: bool,
    /// Direct to the engines.
    pub(crate) direct: Point,
    /// Through the router.
    pub(crate) router: Point,
    /// Router p50 − direct p50, microseconds.
    pub(crate) overhead_p50_us: f64,
    /// Router p99 − direct p99, microseconds.
    pub(crate) overhead_p99_us: f64,
    /// Through nginx (round-robin), when nginx is installed.
    pub(crate) nginx: Option<Point>,
}

async fn one(client: &HttpClient, url: &str, body: Bytes) -> (bool, Duration) {
    let start = Instant::now();
    let Ok(req) = http::Request::post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
    else {
        return (false, start.elapsed());
    };
    let Ok(resp) = client.request(req).await else {
        return (false, start.elapsed());
    };
    let ok = resp.status() == http::StatusCode::OK;
    let ok = ok && resp.into_body().collect().await.is_ok();
    (ok, start.elapsed())
}

/// Sends requests at a fixed `rate` for `seconds` to the targets in turn (round-robin) and
/// measures each one's latency from send to last byte.
async fn measure(
    client: &HttpClient,
    targets: &[String],
    path: &str,
    stream: bool,
    rate: f64,
    seconds: f64,
) -> Point {
    let n = (rate * seconds).round().max(1.0) as usize;
    let body = Bytes::from(
        serde_json::json!({
            "model": MODEL,
            "prompt": "Route this short request to the engine with the least load please.",
            "max_tokens": MAX_TOKENS,
            "stream": stream,
        })
        .to_string(),
    );
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        let url = format!("{}/v1/completions", targets[i % targets.len()]);
        let client = client.clone();
        let body = body.clone();
        tasks.spawn(async move {
            tokio::time::sleep_until(at).await;
            let (ok, lat) = one(&client, &url, body).await;
            (ok, lat, Instant::now())
        });
    }
    let mut lat = Vec::with_capacity(n);
    let mut failed = 0;
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
    Point {
        path: path.to_owned(),
        stream,
        offered_rps: rate,
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

/// Runs the overhead measurement: 3 zero-latency engines, the router with its default
/// (Helm chart) scheduler configuration, each rate non-streaming and streaming, direct first.
pub(crate) async fn run(
    rt: &Runtimes,
    rates: &[f64],
    seconds: f64,
) -> anyhow::Result<Vec<Overhead>> {
    let cfg = kthena_sim::Config::default()
        .with_model(MODEL)
        .with_time_scale(ZERO_LATENCY_TIME_SCALE);
    let sims = harness::start_sims(rt, 3, cfg).await?;
    let scheduler = serde_json::to_value(kthena_router::SchedulerConfig::default())?;
    let yaml = indent(&serde_json::to_string(&scheduler)?);
    let router = harness::start_router(rt, &sims, &yaml, Duration::from_secs(1), false).await;
    let router = match router {
        Ok(r) => r,
        Err(e) => {
            harness::stop_sims(rt, sims).await;
            return Err(e);
        }
    };
    let client = harness::http_client();
    let router_url = format!("http://{}", router.router.addr);
    harness::wait_ready(&client, &router_url).await?;
    let direct: Vec<String> = sims.iter().map(kthena_sim::SimHandle::base_url).collect();
    let via: Vec<String> = vec![router_url];
    let addrs: Vec<std::net::SocketAddr> = sims.iter().map(kthena_sim::SimHandle::addr).collect();
    let nginx = if nginx_installed() {
        match start_nginx(&addrs).await {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(error = %e, "nginx baseline skipped");
                None
            }
        }
    } else {
        None
    };
    let nginx_url: Option<Vec<String>> = nginx.as_ref().map(|n| vec![n.url.clone()]);
    if let Some(u) = &nginx_url {
        let _ = measure(&client, u, "nginx", false, 200.0, 0.5).await;
    }
    // Warm up both paths (connections, allocator).
    let _ = measure(&client, &direct, "direct", false, 200.0, 0.5).await;
    let _ = measure(&client, &via, "router", false, 200.0, 0.5).await;
    let mut out = Vec::new();
    for &rate in rates {
        for stream in [false, true] {
            let d = measure(&client, &direct, "direct", stream, rate, seconds).await;
            let r = measure(&client, &via, "router", stream, rate, seconds).await;
            let n = match &nginx_url {
                Some(u) => Some(measure(&client, u, "nginx", stream, rate, seconds).await),
                None => None,
            };
            out.push(Overhead {
                nginx: n,
                rate,
                stream,
                overhead_p50_us: r.p50_us - d.p50_us,
                overhead_p99_us: r.p99_us - d.p99_us,
                direct: d,
                router: r,
            });
        }
    }
    drop(nginx);
    harness::stop_router(rt, router).await;
    harness::stop_sims(rt, sims).await;
    Ok(out)
}

/// The scheduler section as YAML under `scheduler:` (JSON is YAML; indented two spaces).
fn indent(json: &str) -> String {
    format!("  {json}\n")
}

/// The markdown table of the overhead results.
pub(crate) fn table(rows: &[Overhead]) -> String {
    let mut s = String::from(
        "| offered req/s | stream | direct achieved | router achieved | direct p50 µs | router p50 µs \
         | direct p99 µs | router p99 µs | overhead p50 µs | overhead p99 µs | failed (direct/router) \
         | nginx achieved | nginx p50 µs | nginx p99 µs | nginx overhead p50 µs | nginx overhead p99 µs |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for o in rows {
        let _ = writeln!(
            s,
            "| {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {}/{} | {} |",
            o.rate,
            if o.stream { "yes" } else { "no" },
            o.direct.achieved_rps,
            o.router.achieved_rps,
            o.direct.p50_us,
            o.router.p50_us,
            o.direct.p99_us,
            o.router.p99_us,
            o.overhead_p50_us,
            o.overhead_p99_us,
            o.direct.failed,
            o.router.failed,
            o.nginx.as_ref().map_or_else(
                || "- | - | - | - | -".to_owned(),
                |n| format!(
                    "{:.0} | {:.0} | {:.0} | {:.0} | {:.0}",
                    n.achieved_rps,
                    n.p50_us,
                    n.p99_us,
                    n.p50_us - o.direct.p50_us,
                    n.p99_us - o.direct.p99_us
                ),
            ),
        );
    }
    s
}
