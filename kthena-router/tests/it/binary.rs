//! The `kthena-router` binary as a process: exit codes, plain logs and the open-files limit.

use std::process::{Command, Stdio};
use std::time::Duration;

/// `(soft, hard)` "Max open files" of a running process, from `/proc/PID/limits`.
fn open_files_limit(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("/proc/PID/limits");
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// A configuration error exits with 64 and names the file.
#[test]
fn missing_config_exits_64() {
    let out = Command::new(env!("CARGO_BIN_EXE_kthena-router"))
        .args(["--config", "/nonexistent/router.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/router.yaml"), "{err}");
}

/// With stderr not a terminal (piped), log lines carry no ANSI colour codes.
#[test]
fn logs_have_no_colour_when_stderr_is_piped() {
    let out = Command::new(env!("CARGO_BIN_EXE_kthena-router"))
        .args(["--config", "/nonexistent/router.yaml"])
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ERROR"), "{err}");
    assert!(err.contains("Invalid configuration"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI escape in piped logs: {err:?}"
    );
}

/// The router binary run to its end with `--config cfg` (logs without colour).
fn run_router(cfg: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kthena-router"))
        .arg("--config")
        .arg(cfg)
        .env("NO_COLOR", "1")
        .output()
        .expect("the router binary runs")
}

/// A config with a misspelled key or an invalid value exits with 64 and
/// the documented message, naming the file once.
#[test]
fn bad_config_exits_64_with_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("router.yaml");
    let cases = [
        (
            "standalone:\n  endpionts: []\n",
            "unknown key `standalone.endpionts`: did you mean `endpoints`?",
        ),
        (
            "auth: {jwksUri: 'issuer/jwks.json'}\n",
            "auth.jwksUri: `issuer/jwks.json` is not an http:// or https:// URL",
        ),
        (
            "drainTimeout: 30\n",
            "`drainTimeout`: `30` has no unit: did you mean `30s`?",
        ),
        (
            "metricsScrapeInterval: 0s\n",
            "metricsScrapeInterval: must be greater than 0",
        ),
        (
            "port: 18080\nmetricsPort: 18080\n",
            "port and metricsPort are both 18080: each listener needs a port of its own",
        ),
        (
            "metricsPort: 15000\n",
            "metricsPort and debugPort are both 15000: each listener needs a port of its own",
        ),
        (
            "metricsScrapeTimeout: 0s\n",
            "metricsScrapeTimeout: must be greater than 0",
        ),
    ];
    for (yaml, want) in cases {
        std::fs::write(&cfg, yaml).unwrap();
        let out = run_router(&cfg);
        assert_eq!(out.status.code(), Some(64), "{yaml}");
        let err = String::from_utf8_lossy(&out.stderr);
        let file = format!("invalid config {}: {want}", cfg.display());
        assert!(err.contains(&file), "{yaml}: {err}");
        assert_eq!(err.matches(&*cfg.display().to_string()).count(), 1, "{err}");
    }
}

/// An access log that cannot be written (its directory does not exist) stops the router
/// at start with 64 and a message that says so, naming the file and the setting.
#[test]
fn an_unwritable_access_log_exits_64_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("router.yaml");
    let log = dir.path().join("missing").join("access.log");
    std::fs::write(
        &cfg,
        format!(
            "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\naccessLog: {{output: \"{}\"}}\nstandalone:\n  endpoints: []\n",
            log.display()
        ),
    )
    .unwrap();
    let out = run_router(&cfg);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "cannot open the access log {} (accessLog.output) for writing: No such file or directory (os error 2)",
        log.display()
    );
    assert!(err.contains(&want), "{err}");
}

/// A manifest that does not decode stops the router with 64 and a message that names the
/// file once, then the document, line and field.
#[test]
fn a_bad_manifest_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("router.yaml");
    let manifest = dir.path().join("route.yaml");
    std::fs::write(
        &cfg,
        "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\nstandalone:\n  manifests: [route.yaml]\n  endpoints: []\n",
    )
    .unwrap();
    std::fs::write(
        &manifest,
        "apiVersion: networking.serving.volcano.sh/v1alpha1\nkind: ModelRoute\nmetadata: {name: r}\nspec:\n  modelName: m\n  rules:\n  - name: d\n    targetModels:\n    - {modelServerName: s, weight: -5}\n",
    )
    .unwrap();
    let out = run_router(&cfg);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    let shown = manifest.display().to_string();
    assert_eq!(err.matches(&shown).count(), 1, "{err}");
    assert!(
        err.contains(&format!("invalid manifest {shown}: document 1, line 9")),
        "{err}"
    );
}

/// Started with a low soft limit on open files (as many systems default to 1,024), the router
/// raises it to the hard limit, as Go programs do.
#[test]
fn raises_the_open_files_limit_to_the_hard_limit() {
    let hard = open_files_limit(std::process::id()).1;
    assert!(
        hard > 256,
        "this test needs a hard limit above 256, got {hard}"
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("router.yaml");
    std::fs::write(&cfg, "standalone:\n  manifests: []\n  endpoints: []\n").unwrap();
    // prlimit (util-linux) starts the router with a soft limit of 256.
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile=256:{hard}"))
        .arg(env!("CARGO_BIN_EXE_kthena-router"))
        .args(["--config"])
        .arg(&cfg)
        .args(["--port", "0", "--metrics-port", "0", "--debug-port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut seen = (0, 0);
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        if let Ok(Some(status)) = child.try_wait() {
            panic!("router exited early: {status}");
        }
        // Until prlimit has exec'd the router, /proc shows prlimit's own limits.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.ends_with("kthena-router") {
            seen = open_files_limit(pid);
            if seen.0 == hard {
                break;
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(seen, (hard, hard));
}
