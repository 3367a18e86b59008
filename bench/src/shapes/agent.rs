//! Multi-turn agent sessions: a long, growing conversation per session, closed loop, with
//! think time between turns.
//!
//! Shape (described after public traces' published statistics, no data copied):
//!
//! * **Long inputs with high prefix reuse**, after the Mooncake trace (Qin et al.,
//!   "Mooncake: A KVCache-centric Disaggregated Architecture for LLM Serving", FAST 2025,
//!   and its open trace, whose requests carry block hashes that repeat across a
//!   conversation's requests): inputs average several thousand tokens, outputs a few
//!   hundred at most, and most of each input is a prefix an earlier request already sent.
//!   Here every session starts with one of a few agents' system prompts (tool
//!   definitions, shared across sessions), then a first user message; each later turn sends
//!   the whole conversation so far (previous prompt + the answer it got) plus new user or
//!   tool text, so a turn's new tokens are a small fraction of its prompt.
//! * **Bursty arrivals**, after BurstGPT (Wang et al., 2024), whose request gaps follow
//!   Gamma distributions burstier than Poisson: sessions start on Gamma arrivals
//!   ([`super::gamma_arrivals`], shape below 1), and the think time between a turn's answer
//!   and the next turn (the user reading, a tool running) is Gamma distributed too.
//!
//! Turn texts and first messages are log-normal in length (a long tail, as both traces'
//! length histograms show), clamped to a range.

use serde::{Deserialize, Serialize};

use super::dist::{self, LogNormal};
use crate::workload::{Session, TextGen, TokenCounter, Workload, WorkloadSpec};

/// The shape of an agent workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AgentSpec {
    /// Sessions (conversations).
    pub sessions: usize,
    /// Distinct agents: system prompts shared by the sessions (uniformly drawn).
    pub agents: usize,
    /// Tokens of each agent's system prompt.
    pub system_prompt_len: usize,
    /// Tokens of a session's first user message.
    pub first_message: LogNormal,
    /// Tokens of the user or tool text each later turn appends.
    pub turn_text: LogNormal,
    /// Fewest turns of a session.
    pub min_turns: usize,
    /// Most turns of a session (uniform in `min_turns..=max_turns`).
    pub max_turns: usize,
    /// Mean think time between an answer and the next turn, model seconds.
    pub think_mean_s: f64,
    /// Gamma shape of the think time (1: exponential; below 1: burstier).
    pub think_shape: f64,
    /// Output tokens of every turn.
    pub output_len: usize,
    /// Seed of the text, the lengths, the turn counts and the think times.
    pub seed: u64,
}

impl AgentSpec {
    /// The `agent` scenario's sessions. Full: 192 sessions of 20-28 turns; quick: 96.
    /// Four agents with 2,048-token system prompts; first messages log-normal around 1,024
    /// tokens (256-4,096); each turn appends log-normal text around 384 tokens (32-4,096)
    /// and gets a 160-token answer, so a 24-turn session ends near 15,000 tokens and the
    /// mean input is about 8,000 tokens; think time Gamma with mean 4 s and shape 0.5.
    #[must_use]
    pub fn scenario(quick: bool, seed: u64) -> Self {
        Self {
            sessions: if quick { 96 } else { 192 },
            agents: 4,
            system_prompt_len: 2048,
            first_message: LogNormal {
                median: 1024.0,
                sigma: 0.5,
                min: 256,
                max: 4096,
            },
            turn_text: LogNormal {
                median: 384.0,
                sigma: 0.8,
                min: 32,
                max: 4096,
            },
            min_turns: 20,
            max_turns: 28,
            think_mean_s: 4.0,
            think_shape: 0.5,
            output_len: 160,
            seed,
        }
    }
}

/// Generates the sessions of `spec`: agent system prompts first (the workload's groups),
/// then per session its agent, turn count, texts and think times, all from `spec.seed`.
/// `think_ms[0]` is 0 (a session's first turn goes at its arrival).
#[must_use]
pub fn generate(spec: &AgentSpec, counter: &dyn TokenCounter) -> Workload {
    let mut text = TextGen::new(spec.seed);
    let mut rng = dist::rng(spec.seed ^ 0xa9e7_5e55);
    let agents = spec.agents.max(1);
    let system_prompts = (0..agents)
        .map(|_| text.sized(spec.system_prompt_len, true, counter))
        .collect();
    let min = spec.min_turns.max(1);
    let max = spec.max_turns.max(min);
    let sessions = (0..spec.sessions)
        .map(|_| {
            let group = rand::Rng::random_range(&mut rng, 0..agents);
            let turns = rand::Rng::random_range(&mut rng, min..=max);
            let mut questions = Vec::with_capacity(turns);
            let mut think_ms = Vec::with_capacity(turns);
            questions.push(text.sized(spec.first_message.draw(&mut rng), false, counter));
            think_ms.push(0);
            for _ in 1..turns {
                questions.push(text.sized(spec.turn_text.draw(&mut rng), false, counter));
                let s = dist::gamma(
                    &mut rng,
                    spec.think_shape,
                    spec.think_mean_s / spec.think_shape,
                );
                // Milliseconds, rounded; the cast saturates.
                think_ms.push((s * 1000.0).round().max(0.0) as u64);
            }
            Session {
                group,
                questions,
                think_ms,
            }
        })
        .collect();
    Workload {
        spec: WorkloadSpec {
            num_groups: agents,
            prompts_per_group: spec.sessions.div_ceil(agents),
            system_prompt_len: spec.system_prompt_len,
            question_len: spec.first_message.median.round() as usize,
            output_len: spec.output_len,
            turns: max,
            seed: spec.seed,
        },
        system_prompts,
        sessions,
    }
}
