//! Starting engines and routers in-process, driving load, and reading engine counters.
//!
//! Engines, router and client each get their own Tokio runtime (their own worker threads),
//! as separate processes would, so that the client's work is not scheduled on the router's
//! workers. All traffic goes over loopback TCP with HTTP/1.1, as it would between processes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use indicatif::ProgressBar;
use kthena_bench::report::{EngineCounters, Sample};
use kthena_bench::workload::{Workload, follow_up};
use kthena_router::{Overrides, ProcessEnv, Router};
use kthena_sim::SimHandle;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use kthena_bench::pool::Pool;

/// HTTP client of the load generator (over TCP or an in-memory network).
pub(crate) type HttpClient = Client<kthena_memnet::Connector, Full<Bytes>>;

/// The served model name of every engine.
pub(crate) const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

/// A pooled HTTP/1.1 client with `TCP_NODELAY`.
pub(crate) fn http_client() -> HttpClient {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    client_on(kthena_memnet::Connector::tcp(conn))
}

/// The same client on the in-memory network `net` (virtual-time runs).
pub(crate) fn memory_client(net: &kthena_memnet::MemNet) -> HttpClient {
    client_on(kthena_memnet::Connector::memory(net.clone()))
}

fn client_on(connector: kthena_memnet::Connector) -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(4096)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// Runtimes of the engines and of the router.
#[derive(Debug)]
pub(crate) struct Runtimes {
    /// Engines' runtime.
    pub(crate) sims: Handle,
    /// Router's runtime.
    pub(crate) router: Handle,
}

/// Starts `n` engines with `cfg` on the engines' runtime.
pub(crate) async fn start_sims(
    rt: &Runtimes,
    n: usize,
    cfg: kthena_sim::Config,
) -> anyhow::Result<Vec<SimHandle>> {
    let sims = rt
        .sims
        .spawn(async move { kthena_sim::spawn_many(n, cfg).await })
        .await
        .context("engine start task failed")??;
    Ok(sims)
}

/// Starts the engines of `pool` on the engines' runtime: engine `i` with
/// [`Pool::engine_config`] of `base`, on a free port (and a free KV-event port when `base`
/// publishes events).
pub(crate) async fn start_pool_sims(
    rt: &Runtimes,
    pool: &Pool,
    base: &kthena_sim::Config,
) -> anyhow::Result<Vec<SimHandle>> {
    let cfgs: Vec<kthena_sim::Config> = (0..pool.engines.len())
        .map(|i| {
            let mut c = pool.engine_config(i, base).with_ephemeral_port();
            if c.kv_events_port.is_some() {
                c.kv_events_port = Some(0);
            }
            c
        })
        .collect();
    rt.sims
        .spawn(async move {
            let mut sims = Vec::with_capacity(cfgs.len());
            for c in cfgs {
                sims.push(kthena_sim::spawn(c).await?);
            }
            Ok::<_, anyhow::Error>(sims)
        })
        .await
        .context("engine start task failed")?
}

/// Kills engines on their runtime.
pub(crate) async fn stop_sims(rt: &Runtimes, sims: Vec<SimHandle>) {
    let _ = rt
        .sims
        .spawn(async move {
            for s in sims {
                s.kill().await;
            }
        })
        .await;
}

/// A router in front of engines, with the folder holding its config and manifests.
#[derive(Debug)]
pub(crate) struct RouterRun {
    /// The started router.
    pub(crate) router: Router,
    _dir: tempfile::TempDir,
}

/// Writes `router.yaml` (the given `scheduler:` section, one endpoint per engine, access log
/// off) and `manifests/` (one ModelRoute and ModelServer for [`MODEL`]) into `dir`; returns
/// the config's path. `kv_events` adds each engine's KV-event address.
pub(crate) fn write_router_config(
    dir: &std::path::Path,
    sims: &[SimHandle],
    scheduler_yaml: &str,
    scrape_interval: Duration,
    kv_events: bool,
) -> anyhow::Result<PathBuf> {
    write_pool_router_config(dir, sims, scheduler_yaml, scrape_interval, kv_events, None)
}

/// As [`write_router_config`], for the engines of `pool` when given: their P/D labels and,
/// in a P/D pool, a `pdGroup` ModelServer with the `nixl` connector.
pub(crate) fn write_pool_router_config(
    dir: &std::path::Path,
    sims: &[SimHandle],
    scheduler_yaml: &str,
    scrape_interval: Duration,
    kv_events: bool,
    pool: Option<&Pool>,
) -> anyhow::Result<PathBuf> {
    let mdir = dir.join("manifests");
    std::fs::create_dir_all(&mdir)?;
    let (pd_group, connector) = pool.map_or(("", ""), Pool::model_server_extra);
    std::fs::write(
        mdir.join("server.yaml"),
        format!(
            "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {{name: bench, namespace: default}}
spec:
  model: {MODEL}
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {{app: bench}}{pd_group}
  workloadPort: {{port: 8000}}
{connector}"
        ),
    )?;
    std::fs::write(
        mdir.join("route.yaml"),
        format!(
            "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {{name: bench, namespace: default}}
spec:
  modelName: {MODEL}
  rules:
  - targetModels: [{{modelServerName: bench}}]
"
        ),
    )?;
    let mut endpoints = String::new();
    for (i, s) in sims.iter().enumerate() {
        let extra = pool.map(|p| p.endpoint_labels(i)).unwrap_or_default();
        endpoints.push_str(&format!(
            "  - {{name: engine-{i}, address: \"{}\", labels: {{app: bench{extra}}}",
            s.addr()
        ));
        if kv_events && let Some(port) = s.kv_events_port() {
            endpoints.push_str(&format!(", kvEvents: \"tcp://{}:{port}\"", s.addr().ip()));
        }
        endpoints.push_str("}\n");
    }
    let interval_ms = scrape_interval.as_millis().max(1);
    let text = format!(
        "scheduler:\n{scheduler_yaml}\nbindAddress: 127.0.0.1\nmetricsScrapeInterval: {interval_ms}ms\n\
         accessLog: {{enabled: false}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{endpoints}"
    );
    let path: PathBuf = dir.join("router.yaml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Writes a router config (the given `scheduler:` section, one ModelRoute and ModelServer
/// for [`MODEL`], one endpoint per engine) into a temporary folder and starts the router on
/// ephemeral ports on the router's runtime. `kv_events` adds each engine's KV-event address.
pub(crate) async fn start_router(
    rt: &Runtimes,
    sims: &[SimHandle],
    scheduler_yaml: &str,
    scrape_interval: Duration,
    kv_events: bool,
) -> anyhow::Result<RouterRun> {
    start_pool_router(rt, sims, scheduler_yaml, (scrape_interval, kv_events), None).await
}

/// As [`start_router`], in front of the engines of `pool` when given (their labels, and a
/// P/D ModelServer for a P/D pool); `(scrape_interval, kv_events)` as there.
pub(crate) async fn start_pool_router(
    rt: &Runtimes,
    sims: &[SimHandle],
    scheduler_yaml: &str,
    (scrape_interval, kv_events): (Duration, bool),
    pool: Option<&Pool>,
) -> anyhow::Result<RouterRun> {
    let dir = tempfile::tempdir().context("creating a temporary folder")?;
    let path = write_pool_router_config(
        dir.path(),
        sims,
        scheduler_yaml,
        scrape_interval,
        kv_events,
        pool,
    )?;
    let overrides = Overrides {
        port: Some(0),
        metrics_port: Some(0),
        debug_port: Some(0),
        ..Overrides::default()
    };
    let cfg = kthena_router::load_config(&path, &ProcessEnv, overrides)
        .with_context(|| format!("router config {}", path.display()))?;
    let router = rt
        .router
        .spawn(async move { Router::start(cfg, None, overrides).await })
        .await
        .context("router start task failed")??;
    Ok(RouterRun { router, _dir: dir })
}

/// Waits until the router answers `/readyz` with 200 (first scrape pass done).
pub(crate) async fn wait_ready(client: &HttpClient, base: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let req = http::Request::get(format!("{base}/readyz")).body(Full::new(Bytes::new()))?;
        if let Ok(resp) = client.request(req).await
            && resp.status() == http::StatusCode::OK
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("router at {base} did not become ready within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops a router on its runtime.
pub(crate) async fn stop_router(rt: &Runtimes, run: RouterRun) {
    let RouterRun { router, _dir } = run;
    let _ = rt.router.spawn(router.shutdown()).await;
}

/// Reads an engine's counters from its `/metrics`.
pub(crate) async fn engine_counters(
    client: &HttpClient,
    base: &str,
) -> anyhow::Result<EngineCounters> {
    let req = http::Request::get(format!("{base}/metrics")).body(Full::new(Bytes::new()))?;
    let resp = client.request(req).await?;
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(EngineCounters::from_metrics_text(&String::from_utf8_lossy(
        &body,
    )))
}

/// Load settings of one run.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    /// Base URLs requests go to: session `i` to `targets[i % len]` (a round-robin front
    /// over several routers; usually one).
    pub(crate) targets: Vec<String>,
    /// Arrival times of the sessions, wall seconds from the start.
    pub(crate) arrivals: Vec<f64>,
    /// Most requests in flight.
    pub(crate) max_concurrency: usize,
    /// Model seconds per wall second.
    pub(crate) time_scale: f64,
    /// A request not answered in full within this (wall time) is abandoned and fails.
    pub(crate) timeout: Option<Duration>,
}

/// What one streamed completion returned.
struct Answer {
    ok: bool,
    ttft: Duration,
    e2e: Duration,
    tokens: usize,
    text: String,
}

impl Answer {
    /// A request abandoned after `e2e`: failed, nothing received counted.
    fn timed_out(e2e: Duration) -> Self {
        Self {
            ok: false,
            ttft: Duration::ZERO,
            e2e,
            tokens: 0,
            text: String::new(),
        }
    }
}

/// Sends one streaming `/v1/completions` request and reads the SSE answer to the end.
async fn complete(
    client: &HttpClient,
    target: &str,
    prompt: &str,
    max_tokens: usize,
    keep_text: bool,
) -> Answer {
    let start = Instant::now();
    let mut answer = Answer {
        ok: false,
        ttft: Duration::ZERO,
        e2e: Duration::ZERO,
        tokens: 0,
        text: String::new(),
    };
    let body = serde_json::json!({
        "model": MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": true,
        "temperature": 0,
    })
    .to_string();
    let Ok(req) = http::Request::post(format!("{target}/v1/completions"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
    else {
        return answer;
    };
    let Ok(resp) = client.request(req).await else {
        answer.e2e = start.elapsed();
        return answer;
    };
    let status_ok = resp.status() == http::StatusCode::OK;
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut done = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            break;
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buf.extend_from_slice(data);
        // Complete SSE events end with a blank line.
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..pos + 2).collect();
            let line = String::from_utf8_lossy(&event);
            let Some(payload) = line.trim().strip_prefix("data:") else {
                continue;
            };
            let payload = payload.trim();
            if payload == "[DONE]" {
                done = true;
                continue;
            }
            // A chunk with a `text` field carries one generated token. Only multi-turn
            // sessions need the text itself, so only they pay for parsing the JSON.
            if !payload.contains("\"text\":") {
                continue;
            }
            if answer.tokens == 0 {
                answer.ttft = start.elapsed();
            }
            answer.tokens += 1;
            if keep_text
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(payload)
                && let Some(text) = v["choices"][0]["text"].as_str()
            {
                answer.text.push_str(text);
            }
        }
    }
    answer.e2e = start.elapsed();
    answer.ok = status_ok && done && answer.tokens > 0;
    answer
}

/// Runs a workload open-loop: session `i` starts at `arrivals[i]`, each request waits for a
/// concurrency slot, then is timed from its send to its last byte. A session's follow-up
/// turns go after the previous answer and the session's think time (closed loop per
/// session); a request over `load.timeout` is abandoned and fails. Returns the samples
/// (model seconds) and the wall time from the start to the last completion.
pub(crate) async fn drive(
    client: &HttpClient,
    workload: &Arc<Workload>,
    load: &Load,
    pb: &ProgressBar,
) -> (Vec<Sample>, Duration) {
    let slots = Arc::new(Semaphore::new(load.max_concurrency.max(1)));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let scale = load.time_scale;
    let timeout = load.timeout;
    for (i, at) in load.arrivals.iter().enumerate() {
        let client = client.clone();
        let workload = Arc::clone(workload);
        let slots = Arc::clone(&slots);
        let target = load.targets[i % load.targets.len().max(1)].clone();
        let pb = pb.clone();
        let at = start + Duration::from_secs_f64(*at);
        tasks.spawn(async move {
            tokio::time::sleep_until(at).await;
            let Some(session) = workload.sessions.get(i) else {
                return (Vec::new(), Instant::now());
            };
            let out_len = workload.spec.output_len;
            let turns = session.questions.len();
            let mut prompt = workload.first_prompt(session);
            let mut samples = Vec::with_capacity(turns);
            let mut last = Instant::now();
            for turn in 0..turns {
                if turn > 0 {
                    // Earlier turns failed: the follow-up would not be the same conversation.
                    if samples.iter().any(|s: &Sample| !s.ok) {
                        break;
                    }
                }
                if let Some(&ms) = session.think_ms.get(turn).filter(|_| turn > 0) {
                    // Think time in model milliseconds: wall = model / scale.
                    let wall = Duration::from_secs_f64(ms as f64 / 1000.0 / scale);
                    tokio::time::sleep(wall).await;
                }
                let answer = {
                    let Ok(_permit) = slots.acquire().await else {
                        break;
                    };
                    let sent = Instant::now();
                    let call = complete(&client, &target, &prompt, out_len, turn + 1 < turns);
                    match timeout {
                        Some(t) => tokio::time::timeout(t, call)
                            .await
                            .unwrap_or_else(|_| Answer::timed_out(sent.elapsed())),
                        None => call.await,
                    }
                };
                last = Instant::now();
                pb.inc(1);
                samples.push(Sample {
                    ok: answer.ok,
                    ttft_s: answer.ttft.as_secs_f64() * scale,
                    e2e_s: answer.e2e.as_secs_f64() * scale,
                    output_tokens: answer.tokens,
                });
                if let Some(q) = session.questions.get(turn + 1) {
                    prompt = follow_up(&prompt, &answer.text, q);
                }
            }
            (samples, last)
        });
    }
    let mut samples = Vec::new();
    let mut end = start;
    while let Some(r) = tasks.join_next().await {
        if let Ok((s, last)) = r {
            samples.extend(s);
            end = end.max(last);
        }
    }
    (samples, end - start)
}
