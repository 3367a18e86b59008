//! The stateless Kthena plugins: least-request, least-latency, gpu-usage, random,
//! lora-affinity, lora-affinity-by-name (Go Kthena `pkg/kthena-router/scheduler/plugins/`).

use std::sync::{Mutex, PoisonError};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::invalid;
use crate::Result;
use crate::decision::ScoreNote;
use crate::plugin::{FilterPlugin, ScorePlugin};
use crate::request::Request;
use crate::types::Candidate;

/// Args of `least-request` (filter and score share them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LeastRequestArgs {
    /// The filter keeps endpoints whose engine-reported waiting count is below this.
    /// Default 10; must be > 0 (Go Kthena silently replaces 0 with 10).
    pub max_waiting_requests: u32,
}

impl Default for LeastRequestArgs {
    /// `maxWaitingRequests: 10`.
    fn default() -> Self {
        Self {
            max_waiting_requests: 10,
        }
    }
}

/// `least-request` (Go Kthena `plugins/least_request.go`).
///
/// * Filter: keep endpoints with `waiting_requests < maxWaitingRequests`.
/// * Score: `base_i = in_flight_i + 100 × max(in_flight_i − running_i, 0)`,
///   `score_i = trunc((max − base_i) / max × 100)` with `max = max_i base_i`;
///   every endpoint scores 100 when `max == 0` (no division by zero).
#[derive(Debug, Clone)]
pub struct LeastRequest {
    max_waiting: u32,
}

impl LeastRequest {
    /// Builds the plugin.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`](crate::Error::InvalidArgs) if `maxWaitingRequests` is 0.
    pub fn new(args: LeastRequestArgs) -> Result<Self> {
        if args.max_waiting_requests == 0 {
            return Err(invalid(
                "least-request",
                "maxWaitingRequests must be > 0".to_owned(),
            ));
        }
        Ok(Self {
            max_waiting: args.max_waiting_requests,
        })
    }
}

impl FilterPlugin for LeastRequest {
    fn name(&self) -> &'static str {
        "least-request"
    }

    fn filter(&self, _req: &Request<'_>, cands: &[&Candidate], keep: &mut [bool]) {
        for (k, c) in keep.iter_mut().zip(cands) {
            if c.metrics.waiting_requests >= self.max_waiting {
                *k = false;
            }
        }
    }
}

impl ScorePlugin for LeastRequest {
    fn name(&self) -> &'static str {
        "least-request"
    }

    fn score(&self, _req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        let base = |c: &Candidate| {
            let f = u64::from(c.metrics.in_flight);
            f + 100 * f.saturating_sub(u64::from(c.metrics.running_requests))
        };
        let max = cands.iter().map(|c| base(c)).max().unwrap_or(0);
        for (o, c) in out.iter_mut().zip(cands) {
            *o = if max == 0 {
                100.0
            } else {
                ((max - base(c)) as f64 / max as f64 * 100.0).trunc()
            };
        }
        ScoreNote::default()
    }
}

/// Args of `least-latency`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeastLatencyArgs {
    /// α: weight of the TTFT score; `1 − α` weighs the TPOT score. Finite, in `0..=1`;
    /// default 0.5.
    #[serde(rename = "TTFTTPOTWeightFactor")]
    pub ttft_tpot_weight_factor: f64,
}

impl Default for LeastLatencyArgs {
    /// `TTFTTPOTWeightFactor: 0.5`.
    fn default() -> Self {
        Self {
            ttft_tpot_weight_factor: 0.5,
        }
    }
}

/// `least-latency` (Go Kthena `plugins/least_latency.go`).
///
/// An endpoint with no TTFT or no TPOT data (`None` or `<= 0`) is unknown and scores 50,
/// never "fastest". Over the others: `s_ttft = 100 × (max − ttft) / (max − min)` (100 when
/// `max == min`), the same for TPOT, and `score = trunc(α × s_ttft + (1 − α) × s_tpot)`.
#[derive(Debug, Clone)]
pub struct LeastLatency {
    alpha: f64,
}

impl LeastLatency {
    /// Builds the plugin.
    ///
    /// # Errors
    /// [`Error::InvalidArgs`](crate::Error::InvalidArgs) unless α is finite and in `0..=1`.
    pub fn new(args: LeastLatencyArgs) -> Result<Self> {
        let a = args.ttft_tpot_weight_factor;
        if !a.is_finite() || !(0.0..=1.0).contains(&a) {
            return Err(invalid(
                "least-latency",
                format!("TTFTTPOTWeightFactor must be finite and in [0, 1], got {a}"),
            ));
        }
        Ok(Self { alpha: a })
    }
}

fn known(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite() && *x > 0.0)
}

fn range_score(v: f64, min: f64, max: f64) -> f64 {
    if max == min {
        100.0
    } else {
        100.0 * (max - v) / (max - min)
    }
}

impl ScorePlugin for LeastLatency {
    fn name(&self) -> &'static str {
        "least-latency"
    }

    fn score(&self, _req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        let lat = |c: &Candidate| Some((known(c.metrics.ttft_ms)?, known(c.metrics.tpot_ms)?));
        let (mut t_min, mut t_max, mut p_min, mut p_max) = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        for (t, p) in cands.iter().filter_map(|c| lat(c)) {
            t_min = t_min.min(t);
            t_max = t_max.max(t);
            p_min = p_min.min(p);
            p_max = p_max.max(p);
        }
        for (o, c) in out.iter_mut().zip(cands) {
            *o = match lat(c) {
                None => 50.0,
                Some((t, p)) => (self.alpha * range_score(t, t_min, t_max)
                    + (1.0 - self.alpha) * range_score(p, p_min, p_max))
                .trunc(),
            };
        }
        ScoreNote::default()
    }
}

/// `gpu-usage` (Go Kthena `plugins/gpu.go`):
/// `score = trunc((1 − kv_cache_usage) × 100)`, usage clamped to `0..=1` (a NaN usage counts
/// as full).
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuUsage;

impl ScorePlugin for GpuUsage {
    fn name(&self) -> &'static str {
        "gpu-usage"
    }

    fn score(&self, _req: &Request<'_>, cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        for (o, c) in out.iter_mut().zip(cands) {
            let u = c.metrics.kv_cache_usage;
            let u = if u.is_nan() { 1.0 } else { u.clamp(0.0, 1.0) };
            *o = ((1.0 - u) * 100.0).trunc();
        }
        ScoreNote::default()
    }
}

/// `random` (Go Kthena `plugins/random.go`): a uniform integer in `0..=100` per
/// endpoint from a [`SmallRng`] seeded by the host ([`SchedulerBuilder::seed`](crate::SchedulerBuilder::seed)).
#[derive(Debug)]
pub struct Random {
    rng: Mutex<SmallRng>,
}

impl Random {
    /// A plugin whose draws are fully determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        }
    }
}

impl ScorePlugin for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn score(&self, _req: &Request<'_>, _cands: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        for o in out.iter_mut() {
            *o = f64::from(rng.random_range(0..=100u32));
        }
        ScoreNote::default()
    }
}

/// `lora-affinity`: a request for a LoRA adapter ([`Request::lora`]) keeps only the
/// endpoints that list that adapter as loaded ([`Candidate::lora_adapters`]); a base-model
/// request is never filtered.
///
/// Differs from Go Kthena's `plugins/lora_affinity.go`, which keeps endpoints
/// whose model list contains the *requested* model name and so rejects every endpoint when a
/// route's `modelName` is an alias of the engine's model id; that behaviour is
/// [`LoraAffinityByName`].
#[derive(Debug, Clone, Copy, Default)]
pub struct LoraAffinity;

impl FilterPlugin for LoraAffinity {
    fn name(&self) -> &'static str {
        "lora-affinity"
    }

    fn filter(&self, req: &Request<'_>, cands: &[&Candidate], keep: &mut [bool]) {
        let Some(adapter) = req.lora else { return };
        for (k, c) in keep.iter_mut().zip(cands) {
            if !c.lora_adapters.iter().any(|a| a == adapter) {
                *k = false;
            }
        }
    }
}

/// `lora-affinity-by-name`: Go Kthena's `lora-affinity` exactly
/// (`plugins/lora_affinity.go`): keeps endpoints
/// whose model list (base model plus loaded adapters, from `GET /v1/models`) contains the
/// request's target name (its LoRA adapter if set, else the requested model name, before any
/// rewrite).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoraAffinityByName;

impl FilterPlugin for LoraAffinityByName {
    fn name(&self) -> &'static str {
        "lora-affinity-by-name"
    }

    fn filter(&self, req: &Request<'_>, cands: &[&Candidate], keep: &mut [bool]) {
        let name = req.target_name();
        for (k, c) in keep.iter_mut().zip(cands) {
            if !c.serves(name) {
                *k = false;
            }
        }
    }
}
