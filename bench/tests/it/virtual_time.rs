//! The policy scenarios in virtual time: the table depends on the seeds alone, whatever
//! else runs, and however many runs share the machine.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use kthena_bench::report::PolicyResult;

/// Runs a small `long` scenario (6 groups × 3 prompts, two policies and the direct
/// anchor, seeds 5 and 6) on `jobs` threads; returns the table and the JSON rows.
fn run(jobs: usize, dir: &std::path::Path) -> (String, Vec<PolicyResult>) {
    let json = dir.join(format!("out-{jobs}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_kthena-bench"))
        .args([
            "--scenario",
            "long",
            "--num-groups",
            "6",
            "--prompts-per-group",
            "3",
            "--policies",
            "random,least-request+kvcache-aware,direct",
            "--seed",
            "5",
            "--seeds",
            "2",
            "--jobs",
            &jobs.to_string(),
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
fn two_runs_print_the_same_table_whatever_runs_beside_them() {
    let dir = tempfile::tempdir().unwrap();
    // One run alone on one thread, the other two runs at a time: a run's numbers do not
    // depend on what shares the machine with it.
    let (alone, rows) = run(1, dir.path());
    let (shared, rows2) = run(2, dir.path());
    assert_eq!(alone, shared);
    assert_eq!(rows, rows2);

    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.clock, "virtual");
        assert_eq!(r.failed, 0, "{}", r.policy);
        assert_eq!(r.spread.as_ref().unwrap().seeds, [5, 6]);
    }
    assert_eq!(rows[0].policy, "random");
    assert_eq!(rows[0].requests, 2 * 18);
    assert_eq!(rows[1].requests, 2 * 18);
    // The direct anchor gets the first third of the groups: 2 groups × 3 prompts per seed.
    assert_eq!(rows[2].requests, 2 * 6);
    // Routing by the KV cache finds the shared system prompts random routing misses.
    assert!(
        rows[1].cache_hit_rate > rows[0].cache_hit_rate,
        "{} vs {}",
        rows[1].cache_hit_rate,
        rows[0].cache_hit_rate
    );
    assert!(
        alone.contains("| long | virtual | random | 36/36 |"),
        "{alone}"
    );
}
