//! The engine-pool scenarios end to end in virtual time, at a small size: a P/D pool behind
//! the router's P/D support against the same engines aggregated, and a pool of fast and
//! slow engines, each with its direct runs and ceiling line.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use kthena_bench::report::PolicyResult;
use kthena_bench::scenario::BEST;

/// Runs `--scenario NAME` with 4 groups × 2 prompts, `random`, the best combination and the
/// direct runs, seed 3; returns stdout and the JSON rows.
fn run(scenario: &str, dir: &std::path::Path) -> (String, Vec<PolicyResult>) {
    let json = dir.join(format!("{scenario}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_kthena-bench"))
        .args(["--scenario", scenario, "--num-groups", "4"])
        .args([
            "--prompts-per-group",
            "2",
            "--policies",
            "random,best,direct",
        ])
        .args([
            "--seed",
            "3",
            "--seeds",
            "1",
            "--jobs",
            "2",
            "--no-chart",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (String::from_utf8(out.stdout).unwrap(), rows)
}

#[test]
fn pd_pool_serves_every_request_on_one_prefill_and_one_decode_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (table, rows) = run("pd", dir.path());
    let names: Vec<&str> = rows.iter().map(|r| r.policy.as_str()).collect();
    let aggregated_best = format!("aggregated: {BEST}");
    assert_eq!(
        names,
        [
            "random",
            BEST,
            "aggregated: random",
            &aggregated_best,
            "direct (1 engine, 1/4 of the load)"
        ]
    );
    for r in &rows {
        assert_eq!(r.failed, 0, "{}", r.policy);
        assert_eq!(r.clock, "virtual");
    }
    for r in &rows[..2] {
        // Endpoints 0 and 1 are the prefill engines, 2 and 3 the decode engines.
        assert_eq!(r.requests, 8);
        let per = &r.requests_per_engine;
        assert_eq!((per[0] + per[1], per[2] + per[3]), (8, 8), "{}", r.policy);
    }
    for r in &rows[2..4] {
        assert_eq!(r.requests_per_engine.iter().sum::<u64>(), 8, "{}", r.policy);
    }
    // The direct run gets the first of the four groups: its two prompts.
    assert_eq!(rows[4].requests, 2);
    assert!(table.contains("\nceiling: "), "{table}");
}

#[test]
fn hetero_pool_has_a_direct_run_per_engine_kind() {
    let dir = tempfile::tempdir().unwrap();
    let (table, rows) = run("hetero", dir.path());
    let names: Vec<&str> = rows.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(
        names,
        [
            "random",
            BEST,
            "direct fast (1 H100 engine, 1/4 of the load)",
            "direct slow (1 L40S engine, 1/4 of the load)"
        ]
    );
    for r in &rows[..2] {
        assert_eq!(r.failed, 0, "{}", r.policy);
        assert_eq!(r.requests_per_engine.len(), 4);
        assert_eq!(r.requests_per_engine.iter().sum::<u64>(), 8);
    }
    // The same two requests take longer on the slow engine.
    assert!(rows[3].e2e_mean_s > rows[2].e2e_mean_s);
    let ceiling = 2.0 * rows[2].throughput_rps + 2.0 * rows[3].throughput_rps;
    let random = rows[0].throughput_rps;
    let line = format!(
        "ceiling: {ceiling:.2} req/s = {:.2}x random (virtual)",
        ceiling / random
    );
    assert!(table.contains(&line), "{table}\n{line}");
}
