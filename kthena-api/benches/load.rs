//! Manifest loading cost: `load_str` (spans, typed decode, unknown-field check) and
//! `load_str` + `with_defaults` + `validate`, against a baseline of reading the same YAML
//! into untyped JSON values with `serde-saphyr`.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

/// Go Kthena's PD-disaggregation example: a ModelServing with two roles and full pod specs.
const MANIFEST: &str = include_str!(
    "../../../shared/kthena-manifests/examples/kthena-router/ModelServing-ds1.5b-pd-disaggregation.yaml"
);

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("load");
    g.bench_function("baseline_untyped_yaml", |b| {
        b.iter(|| {
            let v: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(black_box(MANIFEST)).unwrap_or_default();
            v
        });
    });
    g.bench_function("load_str", |b| {
        b.iter(|| kthena_api::load_str("m.yaml", black_box(MANIFEST)))
    });
    g.bench_function("load_default_validate", |b| {
        b.iter(|| {
            kthena_api::load_str("m.yaml", black_box(MANIFEST)).map(|docs| {
                docs.into_iter()
                    .map(|d| d.object.with_defaults().validate().is_ok())
                    .filter(|ok| *ok)
                    .count()
            })
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
