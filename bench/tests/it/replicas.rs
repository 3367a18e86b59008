//! `--routers N`: several routers behind a round-robin front, in virtual time, with and
//! without shared in-flight counts.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

use kthena_bench::report::PolicyResult;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kthena-bench"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn one_row_per_policy_router_count_and_sharing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = bench(&[
        "--scenario",
        "long",
        "--num-groups",
        "6",
        "--prompts-per-group",
        "3",
        "--policies",
        "least-request+kvcache-aware",
        "--routers",
        "1,3",
        "--shared-inflight",
        "both",
        "--seeds",
        "1",
        "--no-chart",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<PolicyResult> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(
        names,
        [
            "least-request+kvcache-aware",
            "least-request+kvcache-aware ×3 routers, shared in-flight",
            "least-request+kvcache-aware ×3 routers, own in-flight",
        ]
    );
    for r in &rows {
        assert_eq!((r.requests, r.failed), (18, 0), "{}", r.policy);
        // Every request reached an engine, whichever router sent it.
        assert_eq!(
            r.requests_per_engine.iter().sum::<u64>(),
            18,
            "{}",
            r.policy
        );
    }
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains(
            "| long | virtual | least-request+kvcache-aware ×3 routers, shared in-flight | 18/18 |"
        ),
        "{table}"
    );
}

#[test]
fn several_routers_are_refused_in_real_time_and_beside_the_peers() {
    let out = bench(&["--scenario", "long", "--routers", "3", "--clock", "real"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--routers above 1 runs in virtual time only (drop --clock real)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = bench(&["--scenario", "long", "--routers", "1,3", "--peers"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "--routers above 1 cannot be combined with --peers (the peers run in real time)"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
