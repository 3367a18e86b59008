//! Offline replay: run the cost model over a list of requests in model time, with no HTTP and
//! no sleeping. Useful to size a profile (saturation throughput, TTFT under load) and for
//! benchmarks.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::{Config, Profile};
use crate::engine::{Output, Scheduler, Submit};
use crate::hash::BlockHasher;
use crate::metrics::Metrics;
use crate::tokenize::Tokenizer;
use crate::{Error, Result};

/// One request of an offline replay.
#[derive(Debug, Clone, PartialEq)]
pub struct OfflineRequest {
    /// Arrival time in model seconds from the start of the replay.
    pub arrival: f64,
    /// Prompt token ids (non-empty).
    pub prompt: Vec<u32>,
    /// Output tokens to generate (>= 1).
    pub max_tokens: usize,
    /// LoRA adapter, if any (adapters are always registered in an offline replay).
    pub lora: Option<String>,
}

/// Result of [`simulate`]. Times are model seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct OfflineReport {
    /// Time from the first arrival to the last token.
    pub makespan: f64,
    /// Generated tokens in total.
    pub output_tokens: usize,
    /// `output_tokens / makespan`, tokens per second.
    pub output_throughput: f64,
    /// Time to first token of each request, in input order.
    pub ttft: Vec<f64>,
    /// Engine steps run.
    pub steps: usize,
    /// Sequences preempted (KV cache full) and recomputed later.
    pub preemptions: usize,
}

/// Replays `requests` through the cost model of `profile` (prefix caching included) and
/// reports throughput and per-request TTFT.
///
/// # Errors
/// [`Error::Config`] if `profile` is invalid or a request has an empty prompt, a zero
/// `max_tokens` or does not fit in `max_model_len`.
pub fn simulate(
    profile: &Profile,
    seed: u64,
    requests: &[OfflineRequest],
) -> Result<OfflineReport> {
    let cfg = Config {
        profile: profile.clone(),
        ..Config::default()
    }
    .validate()?;
    check_requests(profile, requests)?;
    let metrics = Arc::new(Metrics::new(&cfg));
    let hasher = BlockHasher::new(cfg.prefix_caching_hash_algo, cfg.hash_seed.as_deref());
    let mut sched = Scheduler::new(cfg.profile, seed, hasher, Tokenizer::fallback(), metrics);
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| requests[a].arrival.total_cmp(&requests[b].arrival));
    let mut replay = Replay::new(requests);
    let mut next = 0;
    let mut now = order.first().map_or(0.0, |&i| requests[i].arrival);
    let start = now;
    let mut steps = 0;
    while replay.remaining > 0 {
        while next < order.len() && requests[order[next]].arrival <= now {
            replay.submit(&mut sched, order[next]);
            next += 1;
        }
        if sched.is_idle() {
            if let Some(&i) = order.get(next) {
                now = requests[i].arrival;
                continue;
            }
            break;
        }
        let result = sched.step(now);
        steps += 1;
        now += result.duration;
        if result.outputs.is_empty() {
            continue;
        }
        for (tx, out) in result.outputs {
            let _ = tx.send(out);
        }
        replay.collect(now);
    }
    let makespan = now - start;
    let output_tokens = replay.output_tokens;
    Ok(OfflineReport {
        makespan,
        output_tokens,
        output_throughput: if makespan > 0.0 {
            output_tokens as f64 / makespan
        } else {
            0.0
        },
        ttft: replay.ttft,
        steps,
        preemptions: sched.preemptions,
    })
}

/// Every request needs a prompt, `max_tokens >= 1`, a finite arrival `>= 0`, and must fit in
/// `max_model_len`.
fn check_requests(profile: &Profile, requests: &[OfflineRequest]) -> Result<()> {
    for (i, r) in requests.iter().enumerate() {
        if r.prompt.is_empty()
            || r.max_tokens == 0
            || r.prompt.len() + r.max_tokens > profile.max_model_len
            || !(r.arrival.is_finite() && r.arrival >= 0.0)
        {
            return Err(Error::Config {
                field: format!("requests[{i}]"),
                reason: "needs a prompt, max_tokens >= 1, a finite arrival >= 0, and must fit in max_model_len".to_owned(),
            });
        }
    }
    Ok(())
}

/// The requests of a replay in flight: their output channels and what was measured so far.
struct Replay<'a> {
    requests: &'a [OfflineRequest],
    /// Output receiver of each submitted, unfinished request (by input index).
    receivers: Vec<Option<mpsc::UnboundedReceiver<Output>>>,
    /// Time to first token of each request (NaN until it has one), model seconds.
    ttft: Vec<f64>,
    /// Requests not finished yet.
    remaining: usize,
    /// Tokens received so far.
    output_tokens: usize,
}

impl<'a> Replay<'a> {
    fn new(requests: &'a [OfflineRequest]) -> Self {
        Self {
            requests,
            receivers: (0..requests.len()).map(|_| None).collect(),
            ttft: vec![f64::NAN; requests.len()],
            remaining: requests.len(),
            output_tokens: 0,
        }
    }

    /// Queues request `i` (seeded with its index) at its arrival time.
    fn submit(&mut self, sched: &mut Scheduler, i: usize) {
        let r = &self.requests[i];
        let (tx, rx) = mpsc::unbounded_channel();
        sched.add(
            Submit {
                prompt: r.prompt.clone(),
                max_tokens: r.max_tokens,
                lora: r.lora.clone(),
                cache_salt: None,
                remote_prefill: false,
                seed: i as u64,
                tx,
            },
            r.arrival,
        );
        self.receivers[i] = Some(rx);
    }

    /// Counts the outputs delivered at model time `now`: tokens, first-token times and
    /// finished requests.
    fn collect(&mut self, now: f64) {
        for (i, slot) in self.receivers.iter_mut().enumerate() {
            let Some(rx) = slot else { continue };
            let mut done = false;
            while let Ok(out) = rx.try_recv() {
                self.output_tokens += 1;
                if self.ttft[i].is_nan() {
                    self.ttft[i] = now - self.requests[i].arrival;
                }
                done |= out.finished.is_some();
            }
            if done {
                self.remaining -= 1;
                *slot = None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
