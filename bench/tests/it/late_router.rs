//! `--late-router`: a router that starts after the engines served the first half, with the
//! engines' KV-event replay, routes the second half as well as the router that was there
//! from the start; without replay it misses the prefixes the engines hold.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::process::Command;

/// The cells of the table's row whose first cell is `label`.
fn row<'a>(table: &'a str, label: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row {label} in {table}"));
    line.trim_matches('|').split(" | ").map(str::trim).collect()
}

fn percent(cell: &str) -> f64 {
    cell.trim_end_matches('%').parse().unwrap()
}

#[test]
fn a_late_router_with_replay_hits_the_cache_as_the_first_router_did() {
    let out = Command::new(env!("CARGO_BIN_EXE_kthena-bench"))
        .args([
            "--late-router",
            "--num-groups",
            "24",
            "--prompts-per-group",
            "4",
            "--seed",
            "3",
            "--seeds",
            "1",
            "--jobs",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.starts_with(
            "| second half served by | cache hit, first 10% of the second half | cache hit, all of the second half |"
        ),
        "{table}"
    );
    let start = row(&table, "from the start");
    let before = row(&table, "late, no replay (before)");
    let after = row(&table, "late, replay (after)");
    // The replayed index is the first router's: over the first 10% the same decisions, the
    // same hits; later the two routers' own load bookings part ways a little.
    assert_eq!(after[1], start[1], "{table}");
    assert!(
        (percent(after[2]) - percent(start[2])).abs() <= 5.0,
        "{table}"
    );
    assert!(percent(start[1]) > 50.0, "{table}");
    assert!(percent(before[1]) + 20.0 < percent(start[1]), "{table}");
    assert!(percent(before[2]) < percent(start[2]), "{table}");
}
