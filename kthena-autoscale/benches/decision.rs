//! One autoscaling decision for a 1,000-replica target: heterogeneous (8 targets of 125
//! replicas each, costs 1..=8, cost expansion 200 %) against a homogeneous target of the same
//! size as the baseline of the same run.
//!
//! `cargo bench -p kthena-autoscale --bench decision`

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use kthena_autoscale::{
    Behavior, Metrics, Observation, Optimizer, Scaler, TargetObservation, TargetParam,
};

const METRIC: &str = "vllm:num_requests_waiting";

fn targets() -> Metrics {
    Metrics::from([
        (METRIC.to_owned(), 10.0),
        ("vllm:kv_cache_usage_perc".to_owned(), 0.8),
    ])
}

fn load(waiting: f64, kv: f64) -> Metrics {
    Metrics::from([
        (METRIC.to_owned(), waiting),
        ("vllm:kv_cache_usage_perc".to_owned(), kv),
    ])
}

fn homogeneous(c: &mut Criterion) {
    let targets = targets();
    let ready = [load(6_400.0, 400.0)];
    let external = Metrics::new();
    let mut scaler = Scaler::new(Behavior::default());
    let mut now = Duration::ZERO;
    c.bench_function("decision/homogeneous_1000", |b| {
        b.iter(|| {
            now += Duration::from_secs(15);
            let o = Observation {
                min_replicas: 1,
                max_replicas: 1000,
                current: 500,
                tolerance: 0.1,
                targets: &targets,
                unready: 3,
                ready: &ready,
                external: &external,
            };
            black_box(scaler.scale(now, black_box(&o)))
        });
    });
}

fn heterogeneous(c: &mut Criterion) {
    let params: Vec<TargetParam> = (1..=8)
        .map(|cost| TargetParam {
            cost,
            min_replicas: 0,
            max_replicas: 125,
        })
        .collect();
    let targets = targets();
    let observed: Vec<TargetObservation> = (0..8)
        .map(|i| TargetObservation {
            current: if i < 4 { 125 } else { 0 },
            unready: 1,
            ready: Some(load(1_600.0, 100.0)),
            external: Metrics::from([("gpu_utilization".to_owned(), 0.5)]),
        })
        .collect();
    let mut optimizer = Optimizer::new(params, 200, Behavior::default());
    let mut now = Duration::ZERO;
    c.bench_function("decision/heterogeneous_1000", |b| {
        b.iter(|| {
            now += Duration::from_secs(15);
            black_box(optimizer.scale(now, 0.1, &targets, black_box(&observed)))
        });
    });
}

criterion_group!(benches, homogeneous, heterogeneous);
criterion_main!(benches);
