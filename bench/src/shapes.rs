//! The workload shapes of the zoo scenarios beyond SGLang's `generated-shared-prefix`:
//! multi-turn agent sessions ([`agent`]), skewed prefix popularity ([`zipf`]) and bursty
//! arrivals ([`gamma_arrivals`]), with the few distributions they draw from ([`dist`]).
//!
//! Every generator is deterministic in its seed and sizes its text with a
//! [`TokenCounter`](crate::workload::TokenCounter), as [`Workload::generate`] does.

pub mod agent;
pub mod dist;
pub mod zipf;

use serde::{Deserialize, Serialize};

use crate::workload::{TokenCounter, Workload, WorkloadSpec, poisson_arrivals};

/// What a scenario sends: SGLang's shared-prefix dataset, agent sessions, or Zipf-popular
/// system prompts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub enum Shape {
    /// [`Workload::generate`] of the scenario's [`WorkloadSpec`] (`long`, `short`).
    #[default]
    SharedPrefix,
    /// [`agent::generate`].
    Agent(agent::AgentSpec),
    /// [`zipf::generate`].
    Zipf(zipf::ZipfSpec),
}

impl Shape {
    /// The workload of this shape for `seed`: `spec` (its seed replaced) for
    /// [`Shape::SharedPrefix`], the shape's own spec otherwise.
    #[must_use]
    pub fn generate(&self, spec: WorkloadSpec, seed: u64, counter: &dyn TokenCounter) -> Workload {
        match self {
            Self::SharedPrefix => Workload::generate(WorkloadSpec { seed, ..spec }, counter),
            Self::Agent(a) => agent::generate(&agent::AgentSpec { seed, ..*a }, counter),
            Self::Zipf(z) => zipf::generate(&zipf::ZipfSpec { seed, ..*z }, counter),
        }
    }
}

/// Open-loop arrival times in seconds from the start at a mean of `rate` per second, with
/// gaps drawn from a Gamma distribution of shape `shape` (coefficient of variation
/// `1 / sqrt(shape)`): `shape` 1 is a Poisson process, exactly [`poisson_arrivals`]; below 1
/// the arrivals come in bursts separated by lulls, as BurstGPT (Wang et al., "BurstGPT: A
/// Real-world Workload Dataset to Optimize LLM Serving Systems", 2024) reports of its
/// conversation and API traces, whose gaps it fits with Gamma distributions. An infinite or
/// non-positive `rate` sends everything at 0.
#[must_use]
pub fn gamma_arrivals(n: usize, rate: f64, shape: f64, seed: u64) -> Vec<f64> {
    if !rate.is_finite() || rate <= 0.0 {
        return vec![0.0; n];
    }
    if !(shape.is_finite() && shape > 0.0) || (shape - 1.0).abs() < f64::EPSILON {
        return poisson_arrivals(n, rate, seed);
    }
    let mut rng = dist::rng(seed ^ 0x6a33_a77e);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            // Mean gap 1 / rate: shape × scale = 1 / rate.
            t += dist::gamma(&mut rng, shape, 1.0 / (rate * shape));
            t
        })
        .collect()
}

#[cfg(test)]
mod tests;
