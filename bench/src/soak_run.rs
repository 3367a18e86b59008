//! `--scenario soak`: the router binary as its own process in front of three simulated
//! engines whose faults rotate, fed mixed streaming and non-streaming traffic with random
//! client aborts at a fixed rate; probes the router's RSS, open files and in-flight work
//! (`docs/reliability.md`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use kthena_bench::soak::{Outcome, Probe, Record, SoakRun};
use kthena_sim::{Faults, SimHandle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::harness::{self, HttpClient, MODEL, Runtimes};

/// Settings of one soak.
#[derive(Debug, Clone)]
pub(crate) struct SoakOpts {
    /// Load duration.
    pub(crate) duration: Duration,
    /// Requests started per second.
    pub(crate) rate: f64,
    /// Most requests in flight from the client; a start finding none free is counted as shed.
    pub(crate) concurrency: usize,
    /// Fraction (0..1) of requests the client abandons at a random moment.
    pub(crate) abort_ratio: f64,
    /// The `kthena-router` binary.
    pub(crate) router_bin: PathBuf,
    /// Folder for `router.yaml`, `router.log` and the results.
    pub(crate) out_dir: PathBuf,
    /// Seed of the prompts, the mix and the aborts.
    pub(crate) seed: u64,
}

/// The scheduler: least-request, prefix-cache and kvcache-aware (KV events from the engines).
/// Both indexes get small caps (2,000 hashes per endpoint, 8,192 KV entries) that fill during
/// the warm-up, as the engines' small KV caches ([`ENGINE_BLOCKS`]) do: RSS growing after it
/// is then a leak, not a cache still filling towards a large cap.
const SCHEDULER: &str = "  pluginConfig:
  - name: prefix-cache
    args: {blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 2000, topKMatches: 5}
  - name: kvcache-aware
    args: {blockSizeToHash: 16, maxBlocksToMatch: 128, maxIndexEntries: 8192}
  plugins:
    Score:
      enabled:
      - {name: least-request, weight: 1}
      - {name: prefix-cache, weight: 1}
      - {name: kvcache-aware, weight: 2}
";

/// KV-cache blocks (16 tokens) of each engine: full after a few hundred requests, so the engines
/// evict and publish `BlockRemoved` all along.
const ENGINE_BLOCKS: usize = 4096;

/// The engine faults that rotate, one engine at a time.
fn fault_phase(i: usize) -> (&'static str, Faults) {
    let base = Faults::default();
    match i % 4 {
        0 => (
            "30 % errors (500, 503, 429)",
            Faults {
                error_rate: 0.3,
                error_codes: vec![500, 503, 429],
                ..base
            },
        ),
        1 => (
            "streams dropped after 3 chunks",
            Faults {
                drop_after_chunks: Some(3),
                ..base
            },
        ),
        2 => (
            "first byte delayed 250 ms",
            Faults {
                first_byte_delay_ms: 250,
                ..base
            },
        ),
        _ => ("healthy", base),
    }
}

/// The default router binary: `kthena-router` beside this executable.
pub(crate) fn default_router_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("kthena-router")))
        .unwrap_or_else(|| PathBuf::from("kthena-router"))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The router process and its ports.
struct RouterProc {
    child: Child,
    base: String,
    metrics: String,
    debug: String,
}

fn spawn_router(opts: &SoakOpts, sims: &[SimHandle]) -> anyhow::Result<RouterProc> {
    if !opts.router_bin.is_file() {
        bail!(
            "no router binary at {} (build it: cargo build -p kthena-router, or pass --router-bin)",
            opts.router_bin.display()
        );
    }
    std::fs::create_dir_all(&opts.out_dir)?;
    let config = harness::write_router_config(
        &opts.out_dir,
        sims,
        SCHEDULER,
        Duration::from_millis(200),
        true,
    )?;
    let (p, m, d) = (free_port()?, free_port()?, free_port()?);
    let log = std::fs::File::create(opts.out_dir.join("router.log"))?;
    let child = Command::new(&opts.router_bin)
        .arg("--config")
        .arg(&config)
        .args(["--port", &p.to_string(), "--metrics-port", &m.to_string()])
        .args(["--debug-port", &d.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", opts.router_bin.display()))?;
    Ok(RouterProc {
        child,
        base: format!("http://127.0.0.1:{p}"),
        metrics: format!("http://127.0.0.1:{m}"),
        debug: format!("http://127.0.0.1:{d}"),
    })
}

async fn get_text(client: &HttpClient, url: &str) -> anyhow::Result<String> {
    let req = http::Request::get(url).body(Full::new(Bytes::new()))?;
    let resp = client.request(req).await?;
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Every non-zero in-flight counter: each endpoint's `inFlight`, `awaitingFirstToken` and
/// `pendingPrefillTokens` of `/debug/config_dump/pods`, and each `kthena_router_active_*`
/// gauge of `/metrics`.
async fn busy_counters(client: &HttpClient, r: &RouterProc) -> anyhow::Result<Vec<String>> {
    let mut busy = Vec::new();
    let pods = get_text(client, &format!("{}/debug/config_dump/pods", r.debug)).await?;
    let v: serde_json::Value = serde_json::from_str(&pods)?;
    for p in v["pods"].as_array().map(Vec::as_slice).unwrap_or_default() {
        for k in ["inFlight", "awaitingFirstToken", "pendingPrefillTokens"] {
            if let Some(n) = p["metrics"][k].as_u64().filter(|n| *n != 0) {
                busy.push(format!("{}.{k}={n}", p["name"].as_str().unwrap_or("?")));
            }
        }
    }
    busy.extend(active_gauges(&get_text(client, &format!("{}/metrics", r.metrics)).await?).1);
    Ok(busy)
}

/// The value of `kthena_router_kv_index_entries` (0 when absent).
fn kv_index_entries(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("kthena_router_kv_index_entries "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v.max(0.0) as u64)
}

/// `(sum, non-zero series)` of the `kthena_router_active_*` gauges.
fn active_gauges(text: &str) -> (u64, Vec<String>) {
    let mut sum = 0;
    let mut busy = Vec::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("kthena_router_active_"))
    {
        let v = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.trim().parse::<f64>().ok());
        if let Some(v) = v.filter(|v| *v != 0.0) {
            sum += v.max(0.0) as u64;
            busy.push(l.replace(' ', "="));
        }
    }
    (sum, busy)
}

fn proc_probe(pid: u32, at_s: f64, in_flight: u64, kv_index_entries: u64) -> Probe {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Probe {
        at_s,
        rss_kib,
        fds,
        in_flight,
        kv_index_entries,
    }
}

/// Shared prompt prefixes (about 1.5 KB each) so that the cache plugins have work to do.
fn prefixes(seed: u64) -> Vec<String> {
    const WORDS: &[&str] = &[
        "router", "engine", "token", "cache", "prefix", "stream", "model", "latency", "batch",
        "queue", "block", "prompt", "answer", "policy", "weight", "score",
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..32)
        .map(|i| {
            let mut s = format!("System prompt {i}:");
            while s.len() < 1500 {
                s.push(' ');
                s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
            }
            s
        })
        .collect()
}

/// One request of the mix.
struct Shot {
    stream: bool,
    body: Bytes,
    /// Abandon the request after this long, if set.
    abort_after: Option<Duration>,
}

fn shot(rng: &mut SmallRng, prefixes: &[String], abort_ratio: f64) -> Shot {
    let stream = rng.random_bool(0.6);
    let prefix = &prefixes[rng.random_range(0..prefixes.len())];
    let question = format!(
        "Question {}: explain item {}.",
        rng.random::<u32>(),
        rng.random::<u16>()
    );
    let max_tokens = rng.random_range(8..48);
    let body = if rng.random_bool(0.5) {
        serde_json::json!({"model": MODEL, "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": prefix}, {"role": "user", "content": question}]})
    } else {
        serde_json::json!({"model": MODEL, "stream": stream, "max_tokens": max_tokens,
            "prompt": format!("{prefix}\n{question}")})
    };
    let abort_after = rng
        .random_bool(abort_ratio)
        .then(|| Duration::from_millis(rng.random_range(0..150)));
    Shot {
        stream,
        body: Bytes::from(body.to_string()),
        abort_after,
    }
}

/// Sends one request and reads the answer to its end.
async fn send(client: &HttpClient, base: &str, s: &Shot) -> Outcome {
    let path = if s.body.windows(10).any(|w| w == b"\"messages\"") {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    let Ok(req) = http::Request::post(format!("{base}{path}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(s.body.clone()))
    else {
        return Outcome::Transport;
    };
    let Ok(resp) = client.request(req).await else {
        return Outcome::Transport;
    };
    let status = resp.status().as_u16();
    let Ok(body) = resp.into_body().collect().await else {
        return if status == 200 {
            Outcome::StreamError
        } else {
            Outcome::Status(status)
        };
    };
    let body = body.to_bytes();
    if status != 200 {
        return Outcome::Status(status);
    }
    let text = String::from_utf8_lossy(&body);
    if s.stream {
        let done = text.lines().any(|l| l.trim() == "data: [DONE]");
        let error = text.lines().any(|l| l.starts_with("data: {\"error\""));
        if done && !error {
            Outcome::Ok
        } else {
            Outcome::StreamError
        }
    } else if serde_json::from_str::<serde_json::Value>(&text)
        .is_ok_and(|v| v["choices"].is_array())
    {
        Outcome::Ok
    } else {
        Outcome::StreamError
    }
}

/// Sends `s`, abandoning it (dropping the request and its connection) at its abort time.
async fn fire(client: HttpClient, base: Arc<str>, s: Shot, at_s: f64) -> Record {
    let start = Instant::now();
    let outcome = match s.abort_after {
        Some(d) => tokio::time::timeout(d, send(&client, &base, &s))
            .await
            .unwrap_or(Outcome::Aborted),
        None => send(&client, &base, &s).await,
    };
    Record {
        at_s,
        latency_ms: start.elapsed().as_secs_f64() * 1e3,
        stream: s.stream,
        outcome,
    }
}

/// Runs the load for `opts.duration`; returns the records and how many starts were shed.
async fn drive(
    client: &HttpClient,
    base: &str,
    opts: &SoakOpts,
    t0: Instant,
) -> (Vec<Record>, u64) {
    let prefixes = prefixes(opts.seed);
    let mut rng = SmallRng::seed_from_u64(opts.seed ^ 0x5eed);
    let slots = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let base: Arc<str> = Arc::from(base);
    let mut tasks = JoinSet::new();
    let mut records = Vec::new();
    let mut shed = 0;
    let gap = Duration::from_secs_f64(1.0 / opts.rate.max(0.01));
    let mut tick = tokio::time::interval(gap);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while t0.elapsed() < opts.duration {
        tick.tick().await;
        while let Some(r) = tasks.try_join_next() {
            records.extend(r.ok());
        }
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            shed += 1;
            continue;
        };
        let s = shot(&mut rng, &prefixes, opts.abort_ratio);
        let (client, base) = (client.clone(), Arc::clone(&base));
        let at_s = t0.elapsed().as_secs_f64();
        tasks.spawn(async move {
            let r = fire(client, base, s, at_s).await;
            drop(permit);
            r
        });
    }
    while let Some(r) = tasks.join_next().await {
        records.extend(r.ok());
    }
    (records, shed)
}

/// Probes the router every `every` until `stop`; rotates the engines' faults every `phase`.
async fn watch(
    client: HttpClient,
    r: Arc<(u32, String)>,
    sims: Arc<Vec<SimHandle>>,
    t0: Instant,
    every: Duration,
    phase: Duration,
    out: Arc<Mutex<(Vec<Probe>, Vec<String>)>>,
) {
    let mut next_phase = Duration::ZERO;
    let mut i = 0;
    loop {
        let at = t0.elapsed();
        if at >= next_phase {
            let (name, faults) = fault_phase(i);
            for (k, s) in sims.iter().enumerate() {
                s.set_faults(if k == i % sims.len() {
                    faults.clone()
                } else {
                    Faults::default()
                });
            }
            let line = format!(
                "{:.1} min: engine-{} {name}",
                at.as_secs_f64() / 60.0,
                i % sims.len()
            );
            out.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .1
                .push(line);
            i += 1;
            next_phase += phase;
        }
        let text = get_text(&client, &format!("{}/metrics", r.1))
            .await
            .unwrap_or_default();
        let p = proc_probe(
            r.0,
            at.as_secs_f64(),
            active_gauges(&text).0,
            kv_index_entries(&text),
        );
        out.lock().unwrap_or_else(PoisonError::into_inner).0.push(p);
        tokio::time::sleep(every).await;
    }
}

/// Runs one soak and returns what it measured (the caller reports it and fails on
/// [`SoakRun::failures`]).
pub(crate) async fn run(rt: &Runtimes, opts: &SoakOpts) -> anyhow::Result<SoakRun> {
    let mut cfg = kthena_sim::Config::default()
        .with_model(MODEL)
        .with_time_scale(20.0);
    cfg.kv_events_port = Some(0);
    cfg.profile.num_gpu_blocks = ENGINE_BLOCKS;
    let sims = Arc::new(harness::start_sims(rt, 3, cfg).await?);
    let mut router = spawn_router(opts, &sims)?;
    let client = harness::http_client();
    let result = soak(&client, &mut router, &sims, opts).await;
    let _ = router.child.kill();
    let _ = router.child.wait();
    if let Ok(sims) = Arc::try_unwrap(sims) {
        harness::stop_sims(rt, sims).await;
    }
    let mut run = result?;
    let log = std::fs::read_to_string(opts.out_dir.join("router.log")).unwrap_or_default();
    run.panics = log
        .lines()
        .filter(|l| l.contains("panicked"))
        .map(str::to_owned)
        .collect();
    Ok(run)
}

async fn soak(
    client: &HttpClient,
    router: &mut RouterProc,
    sims: &Arc<Vec<SimHandle>>,
    opts: &SoakOpts,
) -> anyhow::Result<SoakRun> {
    harness::wait_ready(client, &router.base).await?;
    let t0 = Instant::now();
    let secs = opts.duration.as_secs_f64();
    let every = Duration::from_secs_f64((secs / 180.0).clamp(1.0, 10.0));
    let phase = Duration::from_secs_f64((secs / 30.0).clamp(10.0, 60.0));
    let shared = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let target = Arc::new((router.child.id(), router.metrics.clone()));
    let mut watcher = JoinSet::new();
    watcher.spawn(watch(
        client.clone(),
        target,
        Arc::clone(sims),
        t0,
        every,
        phase,
        Arc::clone(&shared),
    ));
    let (records, shed) = drive(client, &router.base, opts, t0).await;
    watcher.abort_all();
    for s in sims.iter() {
        s.set_faults(Faults::default());
    }
    let mut leaked = Vec::new();
    for _ in 0..75 {
        leaked = busy_counters(client, router)
            .await
            .unwrap_or_else(|e| vec![format!("unreadable: {e}")]);
        if leaked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut probes, mut faults) =
        std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner));
    let last = probes.last().map_or(0, |p| p.kv_index_entries);
    probes.push(proc_probe(
        router.child.id(),
        t0.elapsed().as_secs_f64(),
        0,
        last,
    ));
    faults.push(format!("client starts shed (no free client slot): {shed}"));
    Ok(SoakRun {
        duration_s: secs,
        warmup_s: (secs / 6.0).min(300.0),
        rate: opts.rate,
        records,
        probes,
        leaked,
        panics: Vec::new(),
        router_alive: router.child.try_wait().is_ok_and(|s| s.is_none()),
        faults,
    })
}

/// Writes the soak's JSON and chart into `out_dir` and `chart` (when given).
pub(crate) fn save(run: &SoakRun, out_dir: &Path, chart: Option<&Path>) -> anyhow::Result<()> {
    std::fs::write(out_dir.join("soak.json"), serde_json::to_string(run)?)?;
    if let Some(path) = chart {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let windows =
            kthena_bench::soak::windows(&run.records, kthena_bench::soak::WINDOW_S, run.duration_s);
        kthena_bench::chart::draw_soak(path, &run.probes, &windows)?;
    }
    Ok(())
}
