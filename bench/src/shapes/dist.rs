//! The distributions the workload shapes draw from, on a seeded [`SmallRng`].

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A seeded generator.
#[must_use]
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// A uniform draw in `(0, 1]` (finite logarithm).
fn open01(rng: &mut SmallRng) -> f64 {
    1.0 - rng.random::<f64>()
}

/// A standard normal draw (Box-Muller).
pub fn normal(rng: &mut SmallRng) -> f64 {
    let (u, v) = (open01(rng), rng.random::<f64>());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A Gamma draw of shape `k > 0` and scale `theta` (mean `k × theta`): Marsaglia and
/// Tsang's method, with `Gamma(k) = Gamma(k + 1) × U^(1/k)` below shape 1.
pub fn gamma(rng: &mut SmallRng, k: f64, theta: f64) -> f64 {
    if k < 1.0 {
        let boost = open01(rng).powf(1.0 / k);
        return gamma(rng, k + 1.0, theta) * boost;
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = open01(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v * theta;
        }
    }
}

/// A log-normal token length: `round(median × e^(sigma × N(0,1)))` clamped to
/// `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogNormal {
    /// Median, tokens.
    pub median: f64,
    /// Standard deviation of the logarithm.
    pub sigma: f64,
    /// Smallest value.
    pub min: usize,
    /// Largest value.
    pub max: usize,
}

impl LogNormal {
    /// One draw.
    pub fn draw(&self, rng: &mut SmallRng) -> usize {
        let v = (self.median * (self.sigma * normal(rng)).exp()).round();
        // Non-negative and clamped below; the cast saturates.
        (v.max(0.0) as usize).clamp(self.min, self.max.max(self.min))
    }
}

/// Zipf's law over ranks `0..n`: rank `k` has weight `(k + 1)^-s`.
#[derive(Debug, Clone, PartialEq)]
pub struct Zipf {
    /// Cumulative probabilities, the last 1.
    cdf: Vec<f64>,
}

impl Zipf {
    /// The law over `n >= 1` ranks with exponent `s`.
    #[must_use]
    pub fn new(n: usize, s: f64) -> Self {
        let w: Vec<f64> = (1..=n.max(1)).map(|k| (k as f64).powf(-s)).collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let cdf = w
            .iter()
            .map(|x| {
                acc += x / total;
                acc
            })
            .collect();
        Self { cdf }
    }

    /// The probability of rank `k`.
    #[must_use]
    pub fn share(&self, k: usize) -> f64 {
        let below = if k == 0 { 0.0 } else { self.cdf[k - 1] };
        self.cdf.get(k).map_or(0.0, |c| c - below)
    }

    /// One rank.
    pub fn draw(&self, rng: &mut SmallRng) -> usize {
        let u = rng.random::<f64>();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}
