use super::*;

fn probe(at_s: f64, rss_kib: u64) -> Probe {
    Probe {
        at_s,
        rss_kib,
        fds: 10,
        in_flight: 0,
        kv_index_entries: 0,
    }
}

#[test]
fn quantiles_by_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(quantile(&v, 0.99), 99.0);
    assert_eq!(quantile(&v, 0.5), 50.0);
    assert_eq!(quantile(&[7.0], 0.99), 7.0);
    assert_eq!(quantile(&[], 0.99), 0.0);
}

#[test]
fn windows_count_every_request_and_time_only_ok_ones() {
    let r = |at_s, latency_ms, outcome| Record {
        at_s,
        latency_ms,
        stream: true,
        outcome,
    };
    let recs = [
        r(1.0, 10.0, Outcome::Ok),
        r(2.0, 30.0, Outcome::Ok),
        r(3.0, 999.0, Outcome::Status(503)),
        r(301.0, 5.0, Outcome::Ok),
        r(700.0, 1.0, Outcome::Aborted),
    ];
    let w = windows(&recs, 300.0, 600.0);
    assert_eq!(w.len(), 2);
    assert_eq!((w[0].requests, w[0].ok, w[0].p99_ms), (3, 2, 30.0));
    // A record past the end (the load's last requests) counts in the last window.
    assert_eq!((w[1].requests, w[1].ok, w[1].p50_ms), (2, 1, 5.0));
}

#[test]
fn rss_growth_ignores_the_warm_up_and_noise() {
    // Steep during the warm-up, then flat with 1 MiB of noise.
    let mut flat: Vec<Probe> = (0u32..10)
        .map(|i| probe(f64::from(i), 10_000 + 5_000 * u64::from(i)))
        .collect();
    flat.extend((10u32..100).map(|i| probe(f64::from(i), 60_000 + u64::from(i % 2) * 1024)));
    let g = rss_growth(&flat, 10.0).unwrap_or_else(|| panic!("enough probes"));
    assert!(!g.grew(RSS_TOLERANCE), "{g:?}");
    // A leak: +100 KiB per probe after the warm-up.
    let leak: Vec<Probe> = (0u32..100)
        .map(|i| probe(f64::from(i), 60_000 + 100 * u64::from(i)))
        .collect();
    let g = rss_growth(&leak, 10.0).unwrap_or_else(|| panic!("enough probes"));
    assert!(g.grew(RSS_TOLERANCE), "{g:?}");
    assert!(rss_growth(&leak[..12], 10.0).is_none());
}

#[test]
fn failures_name_each_broken_check() {
    let mut run = SoakRun {
        duration_s: 100.0,
        probes: (0u32..50).map(|i| probe(f64::from(i), 50_000)).collect(),
        router_alive: true,
        ..SoakRun::default()
    };
    assert!(run.failures().is_empty(), "{:?}", run.failures());
    run.leaked
        .push("kthena_router_active_downstream_requests=1".to_owned());
    run.panics
        .push("thread 'router' panicked at src/proxy.rs:1:1".to_owned());
    run.router_alive = false;
    let f = run.failures();
    assert_eq!(f.len(), 3, "{f:?}");
    assert!(f[0].contains("active_downstream_requests=1"));
    assert!(run.markdown().contains("Verdict: FAIL"));
}
