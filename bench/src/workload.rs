//! The workload generator: SGLang's `generated-shared-prefix` dataset, Poisson arrivals and
//! optional multi-turn sessions.
//!
//! SGLang (`python/sglang/bench_serving.py`, `sample_generated_shared_prefix_requests`) makes
//! `num_groups` random system prompts of `system_prompt_len` tokens, and for each group
//! `prompts_per_group` random questions of `question_len` tokens; every request's prompt is
//! its group's system prompt followed by its question, it asks for `output_len` tokens, and
//! the request list is shuffled. This module does the same with text whose token count is
//! exact under the configured tokenizer (see [`TextGen`]).
//!
//! With `turns > 1` every request becomes a chat *session*: turn `k + 1` sends the prompt of
//! turn `k`, the answer it got, and a new question, so each follow-up extends the previous
//! conversation (the engine can serve the whole history from its prefix cache).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Counts tokens of a text; the generator sizes its prompts with it.
pub trait TokenCounter {
    /// Number of tokens of `text` (no special tokens).
    fn count(&self, text: &str) -> usize;
}

impl TokenCounter for kthena_sim::Tokenizer {
    fn count(&self, text: &str) -> usize {
        self.encode(text, false).len()
    }
}

/// Shape of a generated-shared-prefix workload (SGLang's `--gsp-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Number of distinct system prompts (`--gsp-num-groups`).
    pub num_groups: usize,
    /// Requests (sessions) per system prompt (`--gsp-prompts-per-group`).
    pub prompts_per_group: usize,
    /// Tokens of each system prompt (`--gsp-system-prompt-len`).
    pub system_prompt_len: usize,
    /// Tokens of each question (`--gsp-question-len`).
    pub question_len: usize,
    /// Output tokens asked for per request (`--gsp-output-len`).
    pub output_len: usize,
    /// Turns per session; 1 is SGLang's single-request workload.
    pub turns: usize,
    /// Seed of the text and of the shuffle.
    pub seed: u64,
}

/// One chat session (a single request when it has one turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Index of the session's system prompt in [`Workload::system_prompts`].
    pub group: usize,
    /// The question of every turn, in order; never empty.
    pub questions: Vec<String>,
    /// Think time before each turn, model milliseconds after the previous turn's answer
    /// ended (entry 0, the first turn, is unused); empty: every follow-up goes at once.
    pub think_ms: Vec<u64>,
}

/// A generated workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The spec it was generated from.
    pub spec: WorkloadSpec,
    /// One system prompt per group, each exactly `system_prompt_len` tokens.
    pub system_prompts: Vec<String>,
    /// Sessions in sending order (shuffled).
    pub sessions: Vec<Session>,
}

impl Workload {
    /// Generates the workload: text from `spec.seed`, sized with `counter`.
    ///
    /// Every system prompt has exactly `system_prompt_len` tokens and every question exactly
    /// `question_len` tokens under `counter` whenever the tokenizer allows it (always for the
    /// simulator's fallback tokenizer, where one generated word is one token); a tokenizer that
    /// merges words gets the largest text not over the target.
    #[must_use]
    pub fn generate(spec: WorkloadSpec, counter: &dyn TokenCounter) -> Self {
        let mut text = TextGen::new(spec.seed);
        let system_prompts = (0..spec.num_groups)
            .map(|_| text.sized(spec.system_prompt_len, true, counter))
            .collect();
        let turns = spec.turns.max(1);
        let mut sessions = Vec::with_capacity(spec.num_groups * spec.prompts_per_group);
        for group in 0..spec.num_groups {
            for _ in 0..spec.prompts_per_group {
                let questions = (0..turns)
                    .map(|_| text.sized(spec.question_len, false, counter))
                    .collect();
                sessions.push(Session {
                    group,
                    questions,
                    think_ms: Vec::new(),
                });
            }
        }
        // Fisher-Yates with the workload's own RNG, as SGLang shuffles its request list.
        let mut rng = SmallRng::seed_from_u64(spec.seed ^ 0x5eed_5eed);
        for i in (1..sessions.len()).rev() {
            let j = rng.random_range(0..=i);
            sessions.swap(i, j);
        }
        Self {
            spec,
            system_prompts,
            sessions,
        }
    }

    /// Number of requests the workload sends (sessions × turns).
    #[must_use]
    pub fn num_requests(&self) -> usize {
        self.sessions.iter().map(|s| s.questions.len()).sum()
    }

    /// Keeps every `n`th session (sessions `0, n, 2n, ...`): the share of one engine of
    /// `n` when sessions are independent (agent sessions).
    #[must_use]
    pub fn every_nth(mut self, n: usize) -> Self {
        let n = n.max(1);
        let mut i = 0;
        self.sessions.retain(|_| {
            i += 1;
            (i - 1) % n == 0
        });
        self
    }

    /// The prompt of a session's first turn: its system prompt followed by its first question.
    #[must_use]
    pub fn first_prompt(&self, session: &Session) -> String {
        let system = self
            .system_prompts
            .get(session.group)
            .map_or("", String::as_str);
        let question = session.questions.first().map_or("", String::as_str);
        format!("{system}{question}")
    }

    /// Keeps the sessions of the first `groups` groups only (for a single-engine anchor that
    /// gets the share of one engine under perfect affinity).
    #[must_use]
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.sessions.retain(|s| s.group < groups);
        self
    }
}

/// The prompt of the next turn: the previous prompt, the answer and the new question.
#[must_use]
pub fn follow_up(previous_prompt: &str, answer: &str, question: &str) -> String {
    let mut p = String::with_capacity(previous_prompt.len() + answer.len() + question.len());
    p.push_str(previous_prompt);
    p.push_str(answer);
    p.push_str(question);
    p
}

/// Random text made of three-letter words: `"abc"` first, then `" abc"` pieces.
///
/// Under the simulator's fallback tokenizer (words cut into pieces of at most four
/// characters, leading whitespace included) each word is exactly one token, so `n` words are
/// `n` tokens; a text that continues another one starts with a space, so concatenating a
/// system prompt and a question adds their token counts.
#[derive(Debug)]
pub struct TextGen {
    rng: SmallRng,
}

impl TextGen {
    /// A generator seeded with `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// `n` random words; the first has no leading space when `first` is true.
    pub fn words(&mut self, n: usize, first: bool) -> String {
        let mut s = String::with_capacity(n * 4);
        for i in 0..n {
            if i > 0 || !first {
                s.push(' ');
            }
            for _ in 0..3 {
                s.push(char::from(b'a' + self.rng.random_range(0..26u8)));
            }
        }
        s
    }

    /// Text of exactly `tokens` tokens under `counter` when possible: `tokens` words, then,
    /// if the tokenizer counts differently, the longest prefix (in words) not over `tokens`.
    pub fn sized(&mut self, tokens: usize, first: bool, counter: &dyn TokenCounter) -> String {
        let text = self.words(tokens, first);
        if counter.count(&text) == tokens {
            return text;
        }
        // Words are 3 or 4 bytes; keep the largest word prefix whose count fits.
        let ends: Vec<usize> = text
            .char_indices()
            .filter(|&(i, c)| c == ' ' && i > 0)
            .map(|(i, _)| i)
            .chain(std::iter::once(text.len()))
            .collect();
        let (mut lo, mut hi) = (0usize, ends.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if counter.count(&text[..ends[mid - 1]]) <= tokens {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 {
            return String::new();
        }
        text[..ends[lo - 1]].to_owned()
    }
}

/// Open-loop arrival times, in seconds from the start: a Poisson process of `rate` per
/// second (exponential gaps), or all at 0 when `rate` is infinite (SGLang's default).
#[must_use]
pub fn poisson_arrivals(n: usize, rate: f64, seed: u64) -> Vec<f64> {
    if !rate.is_finite() || rate <= 0.0 {
        return vec![0.0; n];
    }
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xa771_7a15);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            // 1 - U is in (0, 1], so the logarithm is finite.
            let u: f64 = 1.0 - rng.random::<f64>();
            t += -u.ln() / rate;
            t
        })
        .collect()
}

#[cfg(test)]
mod tests;
