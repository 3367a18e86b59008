use super::*;

fn measured(p50: f64, p99: f64) -> Measured {
    Measured {
        achieved_rps: 1000.0,
        sent: 1000,
        failed: 0,
        p50_us: p50,
        p99_us: p99,
    }
}

fn pair(direct_p99: f64, proxy_p99: f64) -> Pair {
    Pair {
        direct: measured(300.0, direct_p99),
        proxy: measured(400.0, proxy_p99),
        cpu_us_per_request: 100.0,
    }
}

#[test]
fn a_stalled_direct_run_is_outvoted_by_the_pooled_ones() {
    // Two contenders, one point, three rounds; one direct run hit a 9 ms stall.
    let pairs = vec![
        vec![vec![
            pair(600.0, 900.0),
            pair(9_000.0, 950.0),
            pair(700.0, 1_000.0),
        ]],
        vec![vec![
            pair(650.0, 700.0),
            pair(620.0, 720.0),
            pair(640.0, 760.0),
        ]],
    ];
    let direct = pooled_direct(&pairs, 1);
    assert_eq!(direct[0].p99_us, 645.0, "median of the six direct runs");
    let a = Cell::of(1000.0, true, &pairs[0][0], direct[0].clone());
    assert_eq!(a.added_p99_us, 950.0 - 645.0);
    assert_eq!(a.added_p50_us, 100.0);
    // Paired, the stalled run turned one pair negative and the median with it lower.
    assert_eq!(a.paired_added_p99_us, 300.0);
    let b = Cell::of(1000.0, true, &pairs[1][0], direct[0].clone());
    assert_eq!(b.added_p99_us, 720.0 - 645.0);
    assert_eq!(b.repeats, 3);
}

#[test]
fn table_has_added_latency_and_cpu_per_request() {
    let row = Row {
        proxy: "nginx (round-robin)".into(),
        cells: vec![Cell {
            rate: 1000.0,
            stream: true,
            direct: measured(900.0, 2000.0),
            proxy: measured(1100.0, 2600.0),
            added_p50_us: 200.0,
            added_p99_us: 600.0,
            paired_added_p99_us: 550.0,
            cpu_us_per_request: 41.6,
            repeats: 3,
        }],
        rss_mib: 29.2,
        rss_anon_mib: 6.6,
    };
    assert_eq!(
        table(&[row]),
        "| added latency, µs (p50 / p99) | 1k req/s stream | RSS MiB (anonymous) |\n|---|---|---|\n\
             | nginx (round-robin) | 200 / 600 | 29 (7) |\n\n\
             | proxy CPU per request, µs | 1k req/s stream |\n|---|---|\n\
             | nginx (round-robin) | 42 |\n"
    );
}
