//! Cost-model benchmarks: how fast the simulator runs (wall time per simulated workload,
//! as a ratio against a single-request baseline), plus the default profile's model-time
//! numbers (cold vs warm TTFT, throughput at saturation), printed once.
#![allow(clippy::unwrap_used, reason = "benchmark")]
#![allow(clippy::print_stdout, reason = "the benchmark reports its numbers")]

use criterion::{Criterion, criterion_group, criterion_main};
use kthena_sim::{OfflineRequest, Profile, simulate};

fn req(arrival: f64, seed: u32, prompt: usize, out: usize) -> OfflineRequest {
    OfflineRequest {
        arrival,
        prompt: (0..prompt as u32)
            .map(|i| seed.wrapping_mul(1_000_003).wrapping_add(i))
            .collect(),
        max_tokens: out,
        lora: None,
    }
}

/// Saturating workload: `n` requests of 512 prompt + 256 output tokens, all at t = 0.
fn saturating(n: u32) -> Vec<OfflineRequest> {
    (0..n).map(|i| req(0.0, i + 1, 512, 256)).collect()
}

fn report() {
    let p = Profile::default();
    let cold = simulate(&p, 0, &[req(0.0, 1, 4096, 1)]).unwrap();
    let warm = simulate(&p, 0, &[req(0.0, 1, 4096, 1), req(1.0, 1, 4096, 1)]).unwrap();
    println!(
        "default profile: 4096-token prompt TTFT cold {:.2} ms, warm {:.2} ms (ratio {:.1}x)",
        cold.ttft[0] * 1e3,
        warm.ttft[1] * 1e3,
        cold.ttft[0] / warm.ttft[1]
    );
    let one = simulate(&p, 0, &[req(0.0, 1, 512, 256)]).unwrap();
    let sat = simulate(&p, 0, &saturating(4096)).unwrap();
    println!(
        "default profile: output throughput 1 request {:.0} tok/s, saturated (4096 x 512+256) {:.0} tok/s ({:.1}x), makespan {:.2} s, preemptions {}",
        one.output_throughput,
        sat.output_throughput,
        sat.output_throughput / one.output_throughput,
        sat.makespan,
        sat.preemptions
    );
}

fn bench(c: &mut Criterion) {
    report();
    let p = Profile::default();
    let single = vec![req(0.0, 1, 512, 256)];
    let batch = saturating(1024);
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10);
    g.bench_function("baseline_1_request_256_steps", |b| {
        b.iter(|| simulate(&p, 0, &single).unwrap())
    });
    g.bench_function("1024_requests_saturated", |b| {
        b.iter(|| simulate(&p, 0, &batch).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
