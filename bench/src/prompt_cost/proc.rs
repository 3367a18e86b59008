//! The router under test as its own process, and its CPU time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use kthena_sim::SimHandle;
use tokio::time::Instant;

use crate::harness::{self, HttpClient};

/// A started router process and its folder (config, manifests, log); killed when dropped.
#[derive(Debug)]
pub(crate) struct RouterProc {
    child: Child,
    /// Its base URL.
    pub(crate) url: String,
    /// Its debug port (`/debug/pprof/profile`), on 127.0.0.1.
    pub(crate) debug_port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl RouterProc {
    /// Starts `program` in front of `sims` (their KV events subscribed to) with the
    /// `scheduler_yaml` section and `tokenizer` (with the `tokenizer_config.json` beside
    /// it) configured for the engines' model; waits until it answers `/readyz` (60 s).
    ///
    /// # Errors
    /// The config cannot be written, the program cannot start or does not become ready.
    pub(crate) async fn start(
        program: &Path,
        sims: &[SimHandle],
        scheduler_yaml: &str,
        tokenizer: &Path,
        client: &HttpClient,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        // A scrape every 5 s: the idle CPU the measurement subtracts stays small.
        let config = harness::write_router_config(
            dir.path(),
            sims,
            scheduler_yaml,
            Duration::from_secs(5),
            true,
        )?;
        let mut text = std::fs::read_to_string(&config)?;
        let tc = tokenizer.with_file_name("tokenizer_config.json");
        text.push_str(&format!(
            "kvCache:\n  tokenizers:\n  - model: {}\n    tokenizer: {}\n    tokenizerConfig: {}\n",
            harness::MODEL,
            tokenizer.display(),
            tc.display()
        ));
        std::fs::write(&config, text)?;
        let (port, debug_port) = (free_port()?, free_port()?);
        let log = std::fs::File::create(dir.path().join("router.log"))?;
        let child = Command::new(program)
            .arg("--config")
            .arg(&config)
            .args(["--port", &port.to_string()])
            .args(["--metrics-port", &free_port()?.to_string()])
            .args(["--debug-port", &debug_port.to_string()])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let running = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            debug_port,
            dir,
        };
        running.wait_ready(client).await?;
        Ok(running)
    }

    async fn wait_ready(&self, client: &HttpClient) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while harness::wait_ready(client, &self.url).await.is_err() {
            if Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(self.dir.path().join("router.log")).unwrap_or_default();
                anyhow::bail!(
                    "{} did not become ready within 60 s; its log:\n{log}",
                    self.url
                );
            }
        }
        Ok(())
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time used so far by the process (every thread, exited ones included), from the
    /// kernel's scheduler clock.
    pub(crate) fn cpu(&self) -> Cpu {
        cpu_of(self.child.id())
    }

    /// The log file.
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.path().join("router.log")
    }
}

impl Drop for RouterProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reading of a process' CPU time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cpu {
    /// `utime + stime` of `/proc/PID/stat`, clock ticks of 10 ms (exited threads included).
    pub(crate) ticks: u64,
    /// The sum over the live threads of the first field of `/proc/PID/task/TID/schedstat`
    /// (time on the CPU), nanoseconds; exact, but a thread that exits takes its time along.
    pub(crate) thread_ns: u64,
}

impl Cpu {
    /// CPU milliseconds from `self` to the later reading `after`: the threads' nanosecond
    /// clocks, unless the 10 ms ticks show more (a thread exited in between).
    pub(crate) fn ms_until(self, after: Self) -> f64 {
        let exact = after.thread_ns.saturating_sub(self.thread_ns) as f64 / 1e6;
        let ticks = after.ticks.saturating_sub(self.ticks) as f64 * 10.0;
        if ticks > exact + 20.0 { ticks } else { exact }
    }
}

/// `pid`'s CPU time now.
pub(crate) fn cpu_of(pid: u32) -> Cpu {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .map_or(0, |s| stat_ticks(&s));
    let mut thread_ns = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                thread_ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Cpu { ticks, thread_ns }
}

/// `utime + stime` (fields 14 and 15) of a `/proc/PID/stat` line, clock ticks.
pub(crate) fn stat_ticks(stat: &str) -> u64 {
    // After the command name in parentheses: field 3 (state) onwards.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}
