//! Shared helpers of the router integration tests: start a router from YAML, engines
//! (kthena-sim or scripted upstreams), and an HTTP client.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kthena_router::{Overrides, Router};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

/// A sim config for fast tests: ephemeral port, the given model, 100x faster than real time.
pub(crate) fn sim_config(model: &str) -> kthena_sim::Config {
    kthena_sim::Config::default()
        .with_ephemeral_port()
        .with_model(model)
        .with_time_scale(100.0)
}

/// A ModelServer manifest.
pub(crate) fn model_server(name: &str, model: &str, app: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {{name: {name}, namespace: default}}
spec:
  model: {model}
  inferenceEngine: vLLM
  workloadSelector: {{matchLabels: {{app: {app}}}}}
  workloadPort: {{port: 8000}}
{extra_spec}"
    )
}

/// A one-rule ModelRoute manifest to one server.
pub(crate) fn simple_route(name: &str, model_name: &str, server: &str) -> String {
    format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {{name: {name}, namespace: default}}
spec:
  modelName: {model_name}
  rules:
  - targetModels: [{{modelServerName: {server}}}]
"
    )
}

/// One `standalone.endpoints` entry.
pub(crate) fn endpoint(name: &str, addr: SocketAddr, app: &str) -> String {
    format!("  - {{name: {name}, address: \"{addr}\", labels: {{app: {app}}}}}\n")
}

/// Scheduler section ranking by least-request only (ties by endpoint name).
pub(crate) const LEAST_REQUEST_ONLY: &str = "scheduler:
  plugins:
    Score:
      enabled:
      - {name: least-request, weight: 1}
";

/// A router started from files in a temporary folder.
pub(crate) struct TestRouter {
    pub dir: tempfile::TempDir,
    pub router: Router,
}

impl TestRouter {
    /// Writes `router.yaml` (`head` + access log + endpoints) and `manifests/*.yaml`, then
    /// starts a router on ephemeral ports.
    pub(crate) async fn start(head: &str, endpoints: &str, manifests: &[(&str, String)]) -> Self {
        Self::start_with_env(head, endpoints, manifests, &[]).await
    }

    /// [`TestRouter::start`] with Go Kthena's environment variables `env` (not the process's).
    pub(crate) async fn start_with_env(
        head: &str,
        endpoints: &str,
        manifests: &[(&str, String)],
        env: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mdir = dir.path().join("manifests");
        std::fs::create_dir_all(&mdir).unwrap();
        for (name, text) in manifests {
            std::fs::write(mdir.join(name), text).unwrap();
        }
        let log = dir.path().join("access.log");
        let cfg = format!(
            "{head}\naccessLog: {{format: json, output: \"{}\"}}\nstandalone:\n  manifests: [manifests]\n  endpoints:\n{endpoints}",
            log.display()
        );
        let path = dir.path().join("router.yaml");
        std::fs::write(&path, cfg).unwrap();
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let router = start_router_with_env(&path, &env).await;
        Self { dir, router }
    }

    /// `http://addr`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.router.addr)
    }

    /// The manifests folder.
    pub(crate) fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    /// Access-log lines (JSON objects) written so far.
    pub(crate) fn access_log(&self) -> Vec<serde_json::Value> {
        self.router.flush_access_log();
        let text = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The value of one exact series line of `/metrics` (0 when absent).
    pub(crate) async fn metric(&self, series: &str) -> f64 {
        let (_, body) = get(&format!("http://{}/metrics", self.router.metrics_addr)).await;
        body.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// `(awaitingFirstToken, pendingPrefillTokens)` of every endpoint, by name, from
    /// `/debug/config_dump/pods`.
    pub(crate) async fn prefill_counters(&self) -> HashMap<String, (u64, u64)> {
        let (_, text) = get(&format!(
            "http://{}/debug/config_dump/pods",
            self.router.debug_addr
        ))
        .await;
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let m = &p["metrics"];
                (
                    p["name"].as_str().unwrap().to_owned(),
                    (
                        m["awaitingFirstToken"].as_u64().unwrap(),
                        m["pendingPrefillTokens"].as_u64().unwrap(),
                    ),
                )
            })
            .collect()
    }

    /// Waits until every endpoint was scraped at least once.
    pub(crate) async fn wait_ready(&self) {
        for _ in 0..200 {
            let (status, _) = get(&format!("{}/readyz", self.url())).await;
            if status == StatusCode::OK {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("router never became ready");
    }
}

/// Starts a router from a config file, all ports ephemeral.
pub(crate) async fn start_router_at(path: &Path) -> Router {
    start_router_with_env(path, &HashMap::new()).await
}

/// Starts a router from a config file and environment `env`, all ports ephemeral.
pub(crate) async fn start_router_with_env(path: &Path, env: &HashMap<String, String>) -> Router {
    let ov = Overrides {
        port: Some(0),
        metrics_port: Some(0),
        debug_port: Some(0),
        ..Overrides::default()
    };
    let cfg = kthena_router::load_config(path, env, ov).unwrap();
    Router::start(cfg, Some(path.to_path_buf()), ov)
        .await
        .unwrap()
}

/// A plain HTTP/1 client.
pub(crate) fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// `GET url` → (status, body text).
pub(crate) async fn get(url: &str) -> (StatusCode, String) {
    let resp = client()
        .request(Request::get(url).body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// `POST` a body with headers; returns the streaming response.
pub(crate) async fn post_stream(
    url: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> Response<Incoming> {
    let mut req = Request::post(url).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    client()
        .request(req.body(Full::new(body.into())).unwrap())
        .await
        .unwrap()
}

/// `POST` and read the whole answer.
pub(crate) async fn post(
    url: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let resp = post_stream(url, body, headers).await;
    let status = resp.status();
    let h = resp.headers().clone();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (status, h, b)
}

/// A chat request body.
pub(crate) fn chat(model: &str, text: &str, stream: bool, max_tokens: u32) -> String {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        "max_tokens": max_tokens,
    })
    .to_string()
}

/// What a scripted upstream does with each request.
#[derive(Clone)]
pub(crate) enum Script {
    /// Answer with this status and JSON body.
    Status(u16, &'static str),
    /// Stream SSE events every `every` until the client goes away; `closed` is told when it
    /// noticed.
    EndlessStream {
        every: Duration,
        closed: mpsc::UnboundedSender<()>,
    },
    /// Stream these SSE bytes, one frame each, then HTTP trailers (`x-t: 1`) when
    /// `trailers`.
    Sse {
        frames: &'static [&'static str],
        trailers: bool,
    },
    /// Answer `/metrics` after `delay`, tracking `(in progress, most at once)` in `seen`.
    SlowMetrics {
        delay: Duration,
        seen: Arc<(AtomicUsize, AtomicUsize)>,
    },
}

/// A scripted HTTP upstream that records every request body it gets.
pub(crate) struct Upstream {
    pub addr: SocketAddr,
    pub bodies: Arc<Mutex<Vec<Bytes>>>,
    tasks: TaskTracker,
}

impl Upstream {
    /// Starts on 127.0.0.1:0.
    pub(crate) async fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let tasks = TaskTracker::new();
        let b2 = Arc::clone(&bodies);
        let t2 = tasks.clone();
        tasks.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let bodies = Arc::clone(&b2);
                let script = script.clone();
                let t3 = t2.clone();
                t2.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let bodies = Arc::clone(&bodies);
                        let script = script.clone();
                        let t4 = t3.clone();
                        async move { Ok::<_, Infallible>(answer(req, bodies, script, &t4).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            bodies,
            tasks,
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.tasks.close();
    }
}

type ScriptBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    bodies: Arc<Mutex<Vec<Bytes>>>,
    script: Script,
    tasks: &TaskTracker,
) -> Response<ScriptBody> {
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    if path == "/metrics"
        && let Script::SlowMetrics { delay, seen } = &script
    {
        let now = seen.0.fetch_add(1, Ordering::SeqCst) + 1;
        seen.1.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(*delay).await;
        seen.0.fetch_sub(1, Ordering::SeqCst);
    }
    if path == "/metrics" {
        return Response::new(
            Full::new(Bytes::from_static(b"vllm:num_requests_waiting 0\n")).boxed(),
        );
    }
    if path == "/v1/models" {
        return Response::new(
            Full::new(Bytes::from_static(br#"{"data":[{"id":"scripted"}]}"#)).boxed(),
        );
    }
    bodies.lock().unwrap().push(body);
    match script {
        Script::SlowMetrics { .. } => Response::new(Full::new(Bytes::from_static(b"{}")).boxed()),
        Script::Status(code, text) => {
            let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
            *r.status_mut() = StatusCode::from_u16(code).unwrap();
            r.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            r
        }
        Script::EndlessStream { every, closed } => {
            let (tx, rx) = mpsc::channel::<Bytes>(1);
            tasks.spawn(async move {
                let mut n = 0u64;
                loop {
                    let ev = Bytes::from(format!(
                        "data: {{\"choices\":[{{\"index\":0,\"text\":\"t{n}\"}}]}}\n\n"
                    ));
                    if tx.send(ev).await.is_err() {
                        let _ = closed.send(());
                        return;
                    }
                    n += 1;
                    tokio::time::sleep(every).await;
                }
            });
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
            });
            let mut r = Response::new(StreamBody::new(stream).boxed());
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            r
        }
        Script::Sse { frames, trailers } => {
            let mut all: Vec<Result<Frame<Bytes>, Infallible>> = frames
                .iter()
                .map(|f| Ok(Frame::data(Bytes::from_static(f.as_bytes()))))
                .collect();
            if trailers {
                let mut t = HeaderMap::new();
                t.insert("x-t", "1".parse().unwrap());
                all.push(Ok(Frame::trailers(t)));
            }
            let mut r = Response::new(StreamBody::new(futures_util::stream::iter(all)).boxed());
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            r
        }
    }
}

/// Runs `tests/<script>` with `python3 script URL MODEL` off the async runtime and parses
/// the JSON it prints. Fails the test with the script's stderr when it exits non-zero (the
/// `openai` package comes from `scripts/services.sh`).
pub(crate) async fn run_python_client(script: &str, url: String, model: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let model = model.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(&path)
            .arg(&url)
            .arg(&model)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "python client {script} failed (is the `openai` package installed? scripts/services.sh installs it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A port on 127.0.0.1 that was free a moment ago (bound and released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The variable that tells a child of this test binary which one test it runs alone.
const ALONE: &str = "KTHENA_TEST_ALONE";

/// Runs the test `module::name` (`module` as `module_path!()` gives it) by itself in a new
/// process of this test binary, for a test that measures its own process (resident memory,
/// open files) or needs its limits to itself: every test of this binary shares one process.
/// Returns true in that child, where the caller goes on with the test's body; in the
/// calling test it waits for the child, fails when the child's test failed, and returns
/// false (the caller returns at once).
pub(crate) fn in_own_process(module: &str, name: &str) -> bool {
    let module = module.split_once("::").map_or("", |(_, m)| m);
    let test = format!("{module}::{name}");
    if std::env::var_os(ALONE).is_some_and(|v| v == test.as_str()) {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, &test)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{test} failed in its own process:\n{stdout}"
    );
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in its own process:\n{stdout}"
    );
    false
}

/// A child process (the `kthena-router` binary), killed on drop.
pub(crate) struct Killed(pub(crate) std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The router binary: `KTHENA_ROUTER_BIN` when set (a target directory shared by several
/// checkouts may hold another checkout's `kthena-router` by the time the test runs; or a
/// release build to try), else the one Cargo built for this test.
pub(crate) fn router_binary() -> PathBuf {
    std::env::var_os("KTHENA_ROUTER_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_kthena-router").into(), Into::into)
}

/// A `kthena-router` process started by [`spawn_router_process`], with its ports.
pub(crate) struct RouterProcess {
    /// The process; killed on drop.
    pub(crate) child: Killed,
    /// Inference port.
    pub(crate) port: u16,
    /// Metrics port.
    pub(crate) metrics: u16,
    /// Debug port.
    pub(crate) debug: u16,
}

/// Starts the router binary (behind `wrapper`, e.g. `prlimit --nofile=256:256`, when not
/// empty) with the configuration `config(port, metrics, debug)` written to
/// `dir/router.yaml`, and waits up to 30 s for `/readyz`. Ports come from [`free_port`];
/// another process may take one between the pick and the router's bind, so a router that
/// exits saying an address is in use is started again on new ports (three tries). A router
/// that exits otherwise, or never becomes ready, fails the test with its standard error.
pub(crate) async fn spawn_router_process(
    dir: &Path,
    wrapper: &[String],
    config: impl Fn(u16, u16, u16) -> String,
) -> RouterProcess {
    for attempt in 0..3 {
        let (port, metrics, debug) = (free_port(), free_port(), free_port());
        let cfg = dir.join("router.yaml");
        std::fs::write(&cfg, config(port, metrics, debug)).unwrap();
        let err_path = dir.join(format!("router-{attempt}.stderr"));
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = std::process::Command::new(program);
                c.args(args).arg(router_binary());
                c
            }
            None => std::process::Command::new(router_binary()),
        };
        let mut child = Killed(
            cmd.arg("--config")
                .arg(&cfg)
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&err_path).unwrap())
                .spawn()
                .unwrap(),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = client()
                .get(format!("http://127.0.0.1:{port}/readyz").parse().unwrap())
                .await
                .is_ok_and(|r| r.status() == http::StatusCode::OK);
            if ready {
                return RouterProcess {
                    child,
                    port,
                    metrics,
                    debug,
                };
            }
            let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
            if let Some(status) = child.0.try_wait().unwrap() {
                let text = stderr();
                if text.contains("in use") {
                    break;
                }
                panic!("the router exited ({status}) before it was ready:\n{text}");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the router never became ready within 30s:\n{}",
                stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("the router found a port in use three times")
}
