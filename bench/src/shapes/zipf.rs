//! Skewed prefix popularity: single requests whose system prompt is drawn from Zipf's law.
//!
//! Production traffic reuses a few system prompts far more than the rest (a popular
//! assistant, a default template). With exponent `s` over `n` prompts, rank `k` (from 1) is
//! drawn with probability `k^-s / H(n, s)`; at `s` = 1.1 over 256 prompts the hottest
//! prompt is a fifth of all requests (20.7%), the three hottest 36%, while the 256 prompts
//! together (1.05 M tokens at 4,096 each) are more than twice what one engine caches.

use serde::{Deserialize, Serialize};

use super::dist::{self, Zipf};
use crate::workload::{Session, TextGen, TokenCounter, Workload, WorkloadSpec};

/// The shape of a Zipf workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ZipfSpec {
    /// Distinct system prompts.
    pub prompts: usize,
    /// Zipf exponent `s`.
    pub exponent: f64,
    /// Requests.
    pub requests: usize,
    /// Tokens of each system prompt.
    pub system_prompt_len: usize,
    /// Tokens of each request's own question.
    pub question_len: usize,
    /// Output tokens per request.
    pub output_len: usize,
    /// Seed of the text and of the draws.
    pub seed: u64,
}

impl ZipfSpec {
    /// The `zipf` scenario: 256 system prompts of 4,096 tokens drawn with `s` = 1.1, a
    /// 256-token question and 128 output tokens each (the `long` scenario's request);
    /// 6,144 requests, or 2,048 with `quick`.
    #[must_use]
    pub fn scenario(quick: bool, seed: u64) -> Self {
        Self {
            prompts: 256,
            exponent: 1.1,
            requests: if quick { 2048 } else { 6144 },
            system_prompt_len: 4096,
            question_len: 256,
            output_len: 128,
            seed,
        }
    }
}

/// Generates the requests of `spec`: the system prompts (rank order), then each request's
/// prompt rank drawn from [`Zipf`] and its question, all from `spec.seed`.
#[must_use]
pub fn generate(spec: &ZipfSpec, counter: &dyn TokenCounter) -> Workload {
    let mut text = TextGen::new(spec.seed);
    let mut rng = dist::rng(spec.seed ^ 0x21bf_0001);
    let law = Zipf::new(spec.prompts, spec.exponent);
    let system_prompts = (0..spec.prompts.max(1))
        .map(|_| text.sized(spec.system_prompt_len, true, counter))
        .collect();
    let sessions = (0..spec.requests)
        .map(|_| Session {
            group: law.draw(&mut rng),
            questions: vec![text.sized(spec.question_len, false, counter)],
            think_ms: Vec::new(),
        })
        .collect();
    Workload {
        spec: WorkloadSpec {
            num_groups: spec.prompts.max(1),
            prompts_per_group: spec.requests.div_ceil(spec.prompts.max(1)),
            system_prompt_len: spec.system_prompt_len,
            question_len: spec.question_len,
            output_len: spec.output_len,
            turns: 1,
            seed: spec.seed,
        },
        system_prompts,
        sessions,
    }
}
