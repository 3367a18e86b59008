//! Overload at full size, against the `kthena-router` binary as its own process: 10,000
//! concurrent streaming requests against `overload.maxInFlight` 1,000. The excess gets 503 at
//! once, every accepted stream finishes, the router never runs short of file descriptors,
//! and its in-flight counts and open sockets return to where they started.
//!
//! The router runs as a separate process so that its sockets and the 10,000 client sockets of
//! this test count against two open-file limits, as they would in production.
#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test fail the test on any error"
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use http_body_util::BodyExt;
use tokio_util::task::TaskTracker;

const CAP: usize = 1_000;
const CLIENTS: usize = 10_000;
const MAX_TOKENS: u32 = 100;

/// The router binary, killed on drop.
struct RouterProcess {
    child: Child,
    addr: String,
    metrics: String,
    debug: String,
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RouterProcess {
    /// Starts the binary on ephemeral ports and reads its addresses from the
    /// `Router listening` log line.
    fn start(config: &std::path::Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kthena-router"))
            .arg("--config")
            .arg(config)
            .args(["--port", "0", "--metrics-port", "0", "--debug-port", "0"])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && line.contains("Router listening") {
                    let _ = tx.send(line);
                    sent = true;
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the router logs `Router listening`");
        let field = |name: &str| -> String {
            let port = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name} in {line}"))
                .rsplit(':')
                .next()
                .unwrap()
                .to_owned();
            format!("http://127.0.0.1:{port}")
        };
        let (addr, metrics, debug) = (field("addr"), field("metrics_addr"), field("debug_addr"));
        Self {
            child,
            addr,
            metrics,
            debug,
        }
    }

    /// Open file descriptors of the router process.
    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// One sample of a Prometheus series from the router's `/metrics`.
    async fn metric(&self, series: &str) -> f64 {
        let (_, text) = get(&format!("{}/metrics", self.metrics)).await;
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in /metrics"))
    }
}

/// Soft "Max open files" of this process.
fn own_open_files_limit() -> u64 {
    let text = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .next()
        .unwrap()
}

fn write_config(dir: &std::path::Path, sim: std::net::SocketAddr) -> std::path::PathBuf {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(
        manifests.join("s.yaml"),
        model_server("srv", "real-model", "demo", ""),
    )
    .unwrap();
    std::fs::write(
        manifests.join("r.yaml"),
        simple_route("route", "public", "srv"),
    )
    .unwrap();
    let config = dir.join("router.yaml");
    std::fs::write(
        &config,
        format!(
            "overload: {{maxInFlight: {CAP}, maxInFlightPerEndpoint: 0}}\n\
             standalone:\n  manifests: [manifests]\n  endpoints:\n{}",
            endpoint("sim-a", sim, "demo")
        ),
    )
    .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_streams_against_a_cap_of_one_thousand() {
    // The 11,000 sockets and the open-files limit checked are this process's: no other test
    // may run in it.
    if !in_own_process(
        module_path!(),
        "ten_thousand_streams_against_a_cap_of_one_thousand",
    ) {
        return;
    }
    // 10,000 client sockets here, the engine's 1,000 in this process too.
    let limit = own_open_files_limit();
    assert!(
        limit >= (CLIENTS + CAP + 1_000) as u64,
        "this test needs an open-files limit of at least {}, the process has {limit}",
        CLIENTS + CAP + 1_000
    );
    let sim = kthena_sim::spawn(
        kthena_sim::Config::default()
            .with_ephemeral_port()
            .with_model("real-model")
            .with_time_scale(4.0),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let router = RouterProcess::start(&write_config(dir.path(), sim.addr()));
    wait_until_routable(&router).await;
    let fds_before = router.open_fds();

    let url = format!("{}/v1/chat/completions", router.addr);
    let body = chat("public", "tell me a long story", true, MAX_TOKENS);
    let finished = Arc::new(AtomicUsize::new(0));
    let peak_fds = Arc::new(AtomicUsize::new(fds_before));
    let tasks = TaskTracker::new();
    let mut handles = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let (url, body, finished) = (url.clone(), body.clone(), Arc::clone(&finished));
        handles.push(tasks.spawn(async move {
            let resp = post_stream(&url, body, &[]).await;
            let status = resp.status();
            let finished_before = finished.load(Ordering::SeqCst);
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            if status == StatusCode::OK {
                finished.fetch_add(1, Ordering::SeqCst);
            }
            (status, finished_before, bytes)
        }));
    }
    tasks.close();
    let sampler = TaskTracker::new();
    {
        let (pid, peak) = (router.child.id(), Arc::clone(&peak_fds));
        let tasks = tasks.clone();
        sampler.spawn(async move {
            while !tasks.is_empty() {
                let n = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
                peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }
    sampler.close();
    let (mut ok, mut shed, mut first_shed_after) = (0usize, 0usize, usize::MAX);
    for h in handles {
        let (status, finished_before, bytes) = h.await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        match status {
            StatusCode::OK => {
                ok += 1;
                assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                shed += 1;
                first_shed_after = first_shed_after.min(finished_before);
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["error"]["code"], "server_overloaded", "{text}");
            }
            s => panic!("unexpected status {s}: {text}"),
        }
    }
    sampler.wait().await;
    let peak = peak_fds.load(Ordering::SeqCst);
    eprintln!(
        "accepted {ok}, shed {shed} of {CLIENTS} against a cap of {CAP}; router fds: \
         {fds_before} before, peak {peak}"
    );
    assert_eq!(ok + shed, CLIENTS);
    assert!(ok >= CAP, "at least the cap is served: {ok}");
    assert!(shed >= CLIENTS / 2, "most of the excess is shed: {shed}");
    // Shed at once: 503s arrived while no accepted stream had finished yet.
    assert_eq!(first_shed_after, 0);
    assert_eq!(
        router
            .metric("kthena_router_overload_rejected_total{reason=\"router_limit\"}")
            .await,
        shed as f64
    );
    // The router held every client socket at once and stayed below its limit.
    let (soft, _) = open_files_limit(router.child.id());
    assert!(
        (peak as u64) < soft,
        "peak {peak} fds reached the limit {soft}"
    );
    assert!(
        peak > CAP,
        "the router saw the concurrent clients: peak {peak} fds"
    );
    // Everything is given back: in-flight counts and sockets.
    assert_eq!(router.metric("kthena_router_active_requests").await, 0.0);
    let (_, pods) = get(&format!("{}/debug/config_dump/pods", router.debug)).await;
    let v: serde_json::Value = serde_json::from_str(&pods).unwrap();
    assert_eq!(v["pods"][0]["metrics"]["inFlight"], 0, "{pods}");
    // The 10,000 client sockets are closed; what stays open is the upstream pools' idle
    // connections to the engine. Each serving thread has its own pool, and a thread opens a
    // connection only when none of its own is idle, so the pools together hold at most one
    // connection per accepted stream (more than the cap when streams finished and new ones
    // were accepted on the other thread), plus the warm-up requests'.
    let idle_upstream = ok + 8;
    let mut after = router.open_fds();
    for _ in 0..100 {
        if after <= fds_before + idle_upstream {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = router.open_fds();
    }
    assert!(
        after <= fds_before + idle_upstream,
        "open fds {after} did not return to {fds_before} + {idle_upstream} idle upstream"
    );
}

/// Waits until the router answers a request for the route (its endpoint is scraped).
async fn wait_until_routable(router: &RouterProcess) {
    let url = format!("{}/v1/chat/completions", router.addr);
    for _ in 0..200 {
        let (status, _, _) = post(&url, chat("public", "hi", false, 1), &[]).await;
        if status == StatusCode::OK {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the router never routed the model");
}

/// `(soft, hard)` "Max open files" of a running process, from `/proc/PID/limits`.
fn open_files_limit(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}
