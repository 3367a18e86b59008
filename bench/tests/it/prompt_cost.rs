//! `--scenario prompt-cost` at a tiny size: the router binary as its own process, unique
//! prompts and a growing conversation, the table and the JSON.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::process::Command;

/// The `kthena-router` binary beside this crate's binary, built first when it is missing
/// (`cargo test -p kthena-bench` builds only this crate's binaries).
fn router_bin() -> PathBuf {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_kthena-bench"));
    let router = bench.with_file_name("kthena-router");
    if !router.is_file() {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-p", "kthena-router", "--bin", "kthena-router"]);
        if bench.parent().and_then(|d| d.file_name()) == Some("release".as_ref()) {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success());
    }
    router
}

#[test]
fn a_tiny_run_measures_every_request_and_writes_the_table_and_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("prompt-cost.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kthena-bench"))
        .args(["--scenario", "prompt-cost", "--prompt-tokens", "3000"])
        .args(["--unique-prompts", "2", "--conversation-turns", "4"])
        .args(["--turn-tokens", "200", "--answer-tokens", "20"])
        .args(["--summary-from-turn", "3", "--settle-ms", "20"])
        .arg("--router-bin")
        .arg(router_bin())
        .arg("--json")
        .arg(&json)
        .env_remove("KTHENA_ROUTER_BASELINE_BIN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.starts_with("| router build | unique ~3k-token prompt: CPU ms/request | TTFB added, ms | conversation turn 3+: CPU ms/request | TTFB added, ms |"),
        "{table}"
    );
    assert!(table.contains("\n| new | "), "{table}");
    assert!(
        table.contains("`tokenizers` alone on the same unique prompts: "),
        "{table}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let new = &report["contenders"][0];
    assert_eq!(new["label"], "new");
    assert_eq!(new["unique"].as_array().unwrap().len(), 2);
    let turns: Vec<u64> = (new["turns"].as_array().unwrap().iter())
        .map(|t| t["prompt_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(turns.len(), 4);
    // 3000 − 4 × 200 tokens of system prompt, then about 200 new tokens a turn.
    assert!((2_000..2_800).contains(&turns[0]), "{turns:?}");
    for w in turns.windows(2) {
        assert!((150..300).contains(&(w[1] - w[0])), "{turns:?}");
    }
    for s in new["unique"].as_array().unwrap() {
        assert!(
            (2_500..3_600).contains(&s["prompt_tokens"].as_u64().unwrap()),
            "{s}"
        );
        assert!(s["router_cpu_ms"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert_eq!(report["tokenizer_alone_ms"].as_array().unwrap().len(), 2);
}
