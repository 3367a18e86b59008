//! `kthena-bench`: the end-to-end benchmark of Kthena's routing policies on simulated engines.
//!
//! The `kthena-bench` binary starts three `kthena-sim` engines and a `kthena-router` in one
//! process, replays Go Kthena's published benchmark (SGLang's `generated-shared-prefix`
//! workload) against each routing policy, and reports throughput, TTFT, latency, the
//! engines' prefix-cache hit rate and the request split per engine (`docs/benchmarks.md`).
//! It also measures the router's own latency overhead with a zero-latency engine profile.
//!
//! This library holds the parts that are deterministic and tested: the workload generator
//! ([`workload`]), the scenarios and policies ([`scenario`]), the zoo's workload shapes
//! ([`shapes`]), the engine pools of the pool scenarios ([`pool`]), the soak's records and verdict
//! ([`soak`]), the aggregation and the
//! markdown table ([`report`]) and the PNG chart ([`chart`]). It is not a load-testing
//! framework: the runner lives in the binary.

pub mod chart;
pub mod pool;
pub mod report;
pub mod scenario;
pub mod shapes;
pub mod soak;
pub mod workload;
