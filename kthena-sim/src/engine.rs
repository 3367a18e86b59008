//! The discrete-time continuous-batching engine.
//!
//! [`Scheduler`] is pure: [`Scheduler::step`] takes the model time `now` (seconds) and returns
//! how long the step takes; the async [`run`] loop sleeps that long divided by `time_scale` and
//! then delivers the step's tokens. One step, after vLLM V1's scheduler
//! (`vllm/v1/core/sched/scheduler.py`):
//!
//! 1. Running sequences, in admission order, each get `min(uncomputed tokens, budget)` tokens
//!    of the `max_num_batched_tokens` budget (1 for a decoding sequence, a chunk for a
//!    prefilling one). A sequence that cannot get KV blocks preempts the newest running
//!    sequence (which goes back to the head of the queue and recomputes later).
//! 2. If nothing was preempted, waiting sequences are admitted in FIFO order while fewer than
//!    `max_num_seqs` run, budget remains, blocks can be allocated and the LoRA slots allow it.
//!    Admission looks up the longest cached prefix of full blocks (capped at `prompt - 1`
//!    tokens, so at least one token is computed).
//! 3. Step time (ms) = `[D > 0] (decode_base + decode_per_seq x D) + [P > 0]
//!    (prefill_overhead + prefill_per_token x P) + lora_load x adapters loaded`, with D
//!    decoding sequences and P prefill tokens in the step.
//! 4. At the end of the step every sequence whose KV caught up samples one token; full
//!    blocks are hashed and committed to the prefix cache.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use lru::LruCache;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::Profile;
use crate::hash::{BlockHash, BlockHasher, RequestKeys};
use crate::kv::{KvCache, KvEvent};
use crate::metrics::Metrics;
use crate::tokenize::Tokenizer;

/// Why a sequence stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishReason {
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Length => "length",
        }
    }
}

/// One generated token, sent at the end of the step that produced it; the last token of a
/// request carries its [`Finished`] summary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Output {
    pub(crate) id: u32,
    pub(crate) text: String,
    pub(crate) finished: Option<Finished>,
}

/// Summary of a finished request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finished {
    pub(crate) reason: FinishReason,
    pub(crate) prompt_tokens: usize,
    pub(crate) completion_tokens: usize,
    /// Prompt tokens served from the prefix cache at (last) admission.
    pub(crate) cached_tokens: usize,
    /// Physical ids of the sequence's cached blocks at the end (prefill-role
    /// `remote_block_ids`).
    pub(crate) block_ids: Vec<u32>,
}

/// A request handed to the engine.
#[derive(Debug)]
pub(crate) struct Submit {
    pub(crate) prompt: Vec<u32>,
    pub(crate) max_tokens: usize,
    pub(crate) lora: Option<String>,
    /// The request's `cache_salt` (a block-hash extra key of its first block).
    pub(crate) cache_salt: Option<String>,
    /// Decode role: the prompt's KV arrives by transfer instead of being computed.
    pub(crate) remote_prefill: bool,
    /// Extra seed material (the request's `seed`, if any).
    pub(crate) seed: u64,
    pub(crate) tx: mpsc::UnboundedSender<Output>,
}

#[derive(Debug)]
struct Seq {
    tokens: Vec<u32>,
    prompt_len: usize,
    max_tokens: usize,
    generated: usize,
    computed: usize,
    committed: Vec<BlockHash>,
    private: usize,
    prompt_hashes: Vec<BlockHash>,
    lora: Option<String>,
    cache_salt: Option<String>,
    remote_prefill: bool,
    /// Model time at which a remote KV transfer completes.
    ready_at: Option<f64>,
    arrival: f64,
    first_scheduled: Option<f64>,
    first_token: Option<f64>,
    last_token: f64,
    cached_tokens: usize,
    rng: SmallRng,
    tx: mpsc::UnboundedSender<Output>,
}

impl Seq {
    fn blocks_held(&self) -> usize {
        self.committed.len() + self.private
    }

    fn keys(&self) -> RequestKeys<'_> {
        RequestKeys {
            lora: self.lora.as_deref(),
            cache_salt: self.cache_salt.as_deref(),
        }
    }
}

/// Hashes and commits every block of `seq` that its computed tokens filled.
fn commit_full_blocks(kv: &mut KvCache, hasher: &BlockHasher, seq: &mut Seq, bs: usize) {
    while (seq.committed.len() + 1) * bs <= seq.computed {
        let n = seq.committed.len();
        let parent = n.checked_sub(1).map(|j| seq.committed[j]);
        let tokens = &seq.tokens[n * bs..(n + 1) * bs];
        let extra = seq.keys().for_block(n);
        let hash = match seq.prompt_hashes.get(n) {
            Some(h) => *h,
            None => hasher.block_hash(parent.as_ref(), tokens, &extra),
        };
        kv.commit(hash, parent, tokens, seq.lora.as_deref(), extra);
        seq.committed.push(hash);
        seq.private = seq.private.saturating_sub(1);
    }
}

/// Result of one step.
#[derive(Debug, Default)]
pub(crate) struct StepResult {
    /// Model time the step takes, in seconds (0 when there was nothing to do).
    pub(crate) duration: f64,
    /// `(sender, output)` pairs to deliver at the end of the step.
    pub(crate) outputs: Outputs,
    /// KV events produced by the step.
    pub(crate) events: Vec<KvEvent>,
}

/// `(sender, output)` pairs of one step, delivered at its end.
type Outputs = Vec<(mpsc::UnboundedSender<Output>, Output)>;

/// How a waiting sequence is admitted (see [`Scheduler::admission`]).
#[derive(Debug, Clone, Copy)]
struct Admission {
    /// Full prompt blocks found in the prefix cache.
    hit_blocks: usize,
    /// `hit_blocks` in tokens.
    hit_tokens: usize,
    /// Tokens to compute in this step (or to receive by KV transfer).
    new: usize,
    /// The prompt's KV arrives from a remote prefill instead of being computed.
    transfer: bool,
    /// KV blocks to allocate.
    need: usize,
}

/// The pure engine state.
#[derive(Debug)]
pub(crate) struct Scheduler {
    profile: Profile,
    seed: u64,
    kv: KvCache,
    hasher: BlockHasher,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    /// Adapters resident on the simulated GPU, least recently used first to go.
    resident_loras: LruCache<String, ()>,
    tokenizer: Tokenizer,
    metrics: Arc<Metrics>,
    /// Preemptions so far.
    pub(crate) preemptions: usize,
}

impl Scheduler {
    pub(crate) fn new(
        profile: Profile,
        seed: u64,
        hasher: BlockHasher,
        tokenizer: Tokenizer,
        metrics: Arc<Metrics>,
    ) -> Self {
        let kv = KvCache::new(profile.num_gpu_blocks, profile.block_size);
        Self {
            profile,
            seed,
            kv,
            hasher,
            waiting: VecDeque::new(),
            running: Vec::new(),
            resident_loras: LruCache::unbounded(),
            tokenizer,
            metrics,
            preemptions: 0,
        }
    }

    /// Queues a request that arrived at model time `now`.
    pub(crate) fn add(&mut self, s: Submit, now: f64) {
        let keys = RequestKeys {
            lora: s.lora.as_deref(),
            cache_salt: s.cache_salt.as_deref(),
        };
        let prompt_hashes = self
            .hasher
            .block_hashes(&s.prompt, self.profile.block_size, keys);
        let mut seed_bytes = self.seed ^ s.seed.rotate_left(17);
        for (i, t) in s.prompt.iter().enumerate().take(64) {
            seed_bytes = seed_bytes
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(u64::from(*t) ^ (i as u64));
        }
        self.waiting.push_back(Seq {
            prompt_len: s.prompt.len(),
            tokens: s.prompt,
            max_tokens: s.max_tokens.max(1),
            generated: 0,
            computed: 0,
            committed: Vec::new(),
            private: 0,
            prompt_hashes,
            lora: s.lora,
            cache_salt: s.cache_salt,
            remote_prefill: s.remote_prefill,
            ready_at: None,
            arrival: now,
            first_scheduled: None,
            first_token: None,
            last_token: now,
            cached_tokens: 0,
            rng: SmallRng::seed_from_u64(seed_bytes),
            tx: s.tx,
        });
    }

    /// Whether there is nothing queued or running.
    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub(crate) fn num_running(&self) -> usize {
        self.running.len()
    }

    pub(crate) fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub(crate) fn kv_usage(&self) -> f64 {
        self.kv.usage()
    }

    fn release(&mut self, seq: &Seq) {
        self.kv.release(&seq.committed, seq.private);
    }

    /// Aborts the sequences whose client went away (vLLM counts them as finished with
    /// reason `abort`).
    fn drop_cancelled(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].tx.is_closed() {
                let seq = self.running.remove(i);
                self.release(&seq);
                self.metrics.inc_aborted();
            } else {
                i += 1;
            }
        }
        let before = self.waiting.len();
        self.waiting.retain(|s| !s.tx.is_closed());
        for _ in self.waiting.len()..before {
            self.metrics.inc_aborted();
        }
    }

    /// Blocks a sequence needs to hold after computing `new` more tokens.
    fn blocks_needed(&self, seq: &Seq, new: usize) -> usize {
        (seq.computed + new)
            .div_ceil(self.profile.block_size)
            .saturating_sub(seq.blocks_held())
    }

    fn preempt_last(&mut self) -> bool {
        let Some(mut victim) = self.running.pop() else {
            return false;
        };
        self.release(&victim);
        victim.committed.clear();
        victim.private = 0;
        victim.computed = 0;
        victim.ready_at = None;
        victim.remote_prefill = false;
        // Generated tokens stay part of the sequence and are recomputed with the prompt.
        victim.prompt_hashes =
            self.hasher
                .block_hashes(&victim.tokens, self.profile.block_size, victim.keys());
        self.metrics.inc_preemptions();
        self.preemptions += 1;
        self.waiting.push_front(victim);
        true
    }

    fn lora_fits(&self, lora: Option<&str>) -> bool {
        let Some(name) = lora else { return true };
        let active: HashSet<&str> = self
            .running
            .iter()
            .filter_map(|s| s.lora.as_deref())
            .collect();
        active.contains(name) || active.len() < self.profile.max_loras
    }

    /// Runs one step at model time `now` (seconds).
    pub(crate) fn step(&mut self, now: f64) -> StepResult {
        self.drop_cancelled();
        let mut budget = self.profile.max_num_batched_tokens;
        // (index into running, tokens scheduled)
        let mut scheduled: Vec<(usize, usize)> = Vec::new();
        let preempted = self.schedule_running(now, &mut budget, &mut scheduled);
        let lora_loads = if preempted {
            0
        } else {
            self.admit(now, &mut budget, &mut scheduled)
        };
        if scheduled.is_empty() {
            return self.transfers_only(now);
        }
        let (ms, tokens) = self.step_ms(&scheduled, lora_loads);
        self.metrics.observe_iteration_tokens(tokens);
        let duration = ms / 1e3;
        let end = now + duration;
        let (mut outputs, finished) = self.apply(&scheduled, end);
        self.finish(finished, &mut outputs, end);
        StepResult {
            duration,
            outputs,
            events: self.kv.take_events(),
        }
    }

    /// Step 1: schedules the running sequences in admission order within `budget`, pushing
    /// `(index into running, tokens)` to `scheduled`. A sequence that cannot get its KV blocks
    /// preempts the newest running ones, or itself when it is the newest. Returns whether
    /// anything was preempted.
    fn schedule_running(
        &mut self,
        now: f64,
        budget: &mut usize,
        scheduled: &mut Vec<(usize, usize)>,
    ) -> bool {
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() {
            if *budget == 0 {
                break;
            }
            let seq = &self.running[i];
            if seq.ready_at.is_some_and(|t| t > now) {
                i += 1;
                continue;
            }
            let new = (seq.tokens.len() - seq.computed).min(*budget);
            if new == 0 {
                i += 1;
                continue;
            }
            let need = self.blocks_needed(seq, new);
            let mut ok = self.kv.allocate(need);
            while !ok {
                if self.running.len() <= i + 1 {
                    break;
                }
                preempted = self.preempt_last();
                ok = self.kv.allocate(need);
            }
            if !ok {
                // This sequence itself must wait: preempt it.
                let seq = self.running.remove(i);
                self.running.push(seq);
                self.preempt_last();
                preempted = true;
                break;
            }
            self.running[i].private += need;
            scheduled.push((i, new));
            *budget -= new;
            i += 1;
        }
        preempted
    }

    /// Step 2: admits waiting sequences in FIFO order while fewer than `max_num_seqs` run,
    /// budget remains, blocks can be allocated and the LoRA slots allow it (a sequence whose
    /// adapter does not fit is skipped and keeps its place). Returns the number of adapters
    /// loaded.
    fn admit(
        &mut self,
        now: f64,
        budget: &mut usize,
        scheduled: &mut Vec<(usize, usize)>,
    ) -> usize {
        let mut lora_loads = 0usize;
        let mut skipped: Vec<Seq> = Vec::new();
        while self.running.len() < self.profile.max_num_seqs && *budget > 0 {
            let Some(mut seq) = self.waiting.pop_front() else {
                break;
            };
            if !self.lora_fits(seq.lora.as_deref()) {
                skipped.push(seq);
                continue;
            }
            let plan = self.admission(&seq, *budget);
            // Reference the hit blocks first so that allocation cannot evict them.
            self.kv.acquire(&seq.prompt_hashes[..plan.hit_blocks]);
            if !self.kv.allocate(plan.need) {
                self.kv.release(&seq.prompt_hashes[..plan.hit_blocks], 0);
                self.waiting.push_front(seq);
                break;
            }
            seq.committed = seq.prompt_hashes[..plan.hit_blocks].to_vec();
            seq.private = plan.need;
            seq.computed = plan.hit_tokens;
            seq.cached_tokens = plan.hit_tokens;
            seq.first_scheduled.get_or_insert(now);
            self.metrics
                .observe_prefix(seq.tokens.len(), plan.hit_tokens);
            if self.load_lora(seq.lora.as_ref()) {
                lora_loads += 1;
            }
            let idx = self.running.len();
            if plan.transfer {
                let ms = self.profile.kv_transfer_base_ms
                    + self.profile.kv_transfer_per_token_ms * plan.new as f64;
                seq.ready_at = Some(now + ms / 1e3);
                seq.computed = seq.tokens.len().saturating_sub(1);
                self.running.push(seq);
            } else {
                self.running.push(seq);
                scheduled.push((idx, plan.new));
                *budget -= plan.new;
            }
        }
        for s in skipped.into_iter().rev() {
            self.waiting.push_front(s);
        }
        lora_loads
    }

    /// How a waiting sequence would be admitted with `budget` tokens left: the longest cached
    /// prefix of full blocks (capped at `prompt - 1` tokens, so at least one token is
    /// computed), the tokens to compute (or, with a remote prefill, to transfer) and the
    /// blocks to allocate.
    fn admission(&self, seq: &Seq, budget: usize) -> Admission {
        let bs = self.profile.block_size;
        let max_hit_blocks = (seq.tokens.len().saturating_sub(1)) / bs;
        let hit_blocks = self
            .kv
            .longest_prefix(&seq.prompt_hashes)
            .min(max_hit_blocks);
        let hit_tokens = hit_blocks * bs;
        let (new, transfer) = if seq.remote_prefill {
            // KV for all but the last prompt token arrives by transfer.
            (
                seq.tokens
                    .len()
                    .saturating_sub(1)
                    .saturating_sub(hit_tokens),
                true,
            )
        } else {
            ((seq.tokens.len() - hit_tokens).min(budget), false)
        };
        let need = (hit_tokens + new).div_ceil(bs).saturating_sub(hit_blocks);
        Admission {
            hit_blocks,
            hit_tokens,
            new,
            transfer,
            need,
        }
    }

    /// Makes `lora` resident (evicting the least recently used beyond `max_loras`); true when
    /// it was not resident, so loading it costs `lora_load_ms`.
    fn load_lora(&mut self, lora: Option<&String>) -> bool {
        let Some(name) = lora else { return false };
        if self.resident_loras.get(name).is_some() {
            return false;
        }
        self.resident_loras.push(name.clone(), ());
        while self.resident_loras.len() > self.profile.max_loras {
            self.resident_loras.pop_lru();
        }
        true
    }

    /// Step 3: the step's model time in ms and its tokens (decoding sequences plus prefill
    /// tokens), by the formula in the module docs.
    fn step_ms(&self, scheduled: &[(usize, usize)], lora_loads: usize) -> (f64, usize) {
        let mut decode_seqs = 0usize;
        let mut prefill_tokens = 0usize;
        for &(i, new) in scheduled {
            let seq = &self.running[i];
            if seq.computed >= seq.prompt_len && new == 1 {
                decode_seqs += 1;
            } else {
                prefill_tokens += new;
            }
        }
        let p = &self.profile;
        let mut ms = 0.0;
        if decode_seqs > 0 {
            ms += p.decode_base_ms + p.decode_per_seq_ms * decode_seqs as f64;
        }
        if prefill_tokens > 0 {
            ms += p.prefill_overhead_ms + p.prefill_per_token_ms * prefill_tokens as f64;
        }
        ms += p.lora_load_ms * lora_loads as f64;
        (ms, decode_seqs + prefill_tokens)
    }

    /// A step with nothing to compute, only KV transfers in flight: it lasts until the first
    /// transfer completes (0 when there is none).
    fn transfers_only(&mut self, now: f64) -> StepResult {
        let next = self
            .running
            .iter()
            .filter_map(|s| s.ready_at)
            .filter(|t| *t > now)
            .fold(f64::INFINITY, f64::min);
        let mut result = StepResult {
            events: self.kv.take_events(),
            ..StepResult::default()
        };
        if next.is_finite() {
            result.duration = next - now;
        }
        result
    }

    /// Step 4: at model time `end`, every scheduled sequence whose KV caught up samples one
    /// token, and full blocks are committed to the prefix cache. Returns the outputs and the
    /// `(index into running, index into outputs)` of the sequences that are done.
    fn apply(&mut self, scheduled: &[(usize, usize)], end: f64) -> (Outputs, Vec<(usize, usize)>) {
        let bs = self.profile.block_size;
        let mut outputs = Vec::new();
        let mut finished: Vec<(usize, usize)> = Vec::new();
        for &(i, new) in scheduled {
            let seq = &mut self.running[i];
            seq.ready_at = None;
            seq.computed += new;
            commit_full_blocks(&mut self.kv, &self.hasher, seq, bs);
            if seq.computed < seq.tokens.len() {
                continue;
            }
            let vocab = self.tokenizer.output_vocab();
            let (id, text) = vocab[seq.rng.random_range(0..vocab.len())].clone();
            seq.tokens.push(id);
            seq.generated += 1;
            if seq.first_token.is_none() {
                seq.first_token = Some(end);
                self.metrics.inc_prompt(seq.prompt_len);
                self.metrics.observe_ttft(end - seq.arrival);
                if let Some(t0) = seq.first_scheduled {
                    self.metrics.observe_queue(t0 - seq.arrival);
                }
            } else {
                self.metrics.observe_itl(end - seq.last_token);
            }
            seq.last_token = end;
            self.metrics.inc_generation(1);
            outputs.push((
                seq.tx.clone(),
                Output {
                    id,
                    text,
                    finished: None,
                },
            ));
            if seq.generated >= seq.max_tokens || seq.tokens.len() >= self.profile.max_model_len {
                finished.push((i, outputs.len() - 1));
            }
        }
        (outputs, finished)
    }

    /// Removes the finished sequences from `running`, frees their blocks and marks their last
    /// output with the summary.
    fn finish(&mut self, mut finished: Vec<(usize, usize)>, outputs: &mut Outputs, end: f64) {
        finished.sort_unstable();
        for (i, out) in finished.into_iter().rev() {
            let seq = self.running.remove(i);
            self.release(&seq);
            self.metrics.observe_e2e(end - seq.arrival);
            self.metrics.observe_request(seq.prompt_len, seq.generated);
            outputs[out].1.finished = Some(Finished {
                reason: FinishReason::Length,
                prompt_tokens: seq.prompt_len,
                completion_tokens: seq.generated,
                cached_tokens: seq.cached_tokens,
                block_ids: self.kv.block_ids(&seq.committed),
            });
        }
    }

    /// Distinct LoRA adapters of running and waiting sequences (for `vllm:lora_requests_info`).
    pub(crate) fn lora_sets(&self) -> (Vec<String>, Vec<String>) {
        let mut run: Vec<String> = self.running.iter().filter_map(|s| s.lora.clone()).collect();
        let mut wait: Vec<String> = self.waiting.iter().filter_map(|s| s.lora.clone()).collect();
        run.sort();
        run.dedup();
        wait.sort();
        wait.dedup();
        (run, wait)
    }

    /// Clears free cached blocks (vLLM `/reset_prefix_cache`).
    pub(crate) fn reset_prefix_cache(&mut self) -> Vec<KvEvent> {
        self.kv.reset();
        self.kv.take_events()
    }
}

/// Messages into the engine loop.
#[derive(Debug)]
pub(crate) enum Command {
    Submit(Submit),
    ResetPrefixCache,
}

/// The engine loop: runs steps in model time, sleeping `duration / time_scale` of wall time
/// per step, until the command channel closes.
pub(crate) async fn run(
    mut sched: Scheduler,
    mut rx: mpsc::UnboundedReceiver<Command>,
    time_scale: f64,
    events: Option<mpsc::UnboundedSender<Vec<KvEvent>>>,
) {
    let start = Instant::now();
    let mut sim_now = 0.0f64;
    let wall_sim = |start: Instant| start.elapsed().as_secs_f64() * time_scale;
    let publish = |evs: Vec<KvEvent>| {
        if let Some(tx) = &events
            && !evs.is_empty()
        {
            let _ = tx.send(evs);
        }
    };
    // Model time advances by step durations while busy (so latencies are exact functions of
    // the cost model) and jumps to the wall-clock equivalent when a request wakes an idle
    // engine.
    loop {
        let mut closed = false;
        loop {
            match rx.try_recv() {
                Ok(Command::Submit(s)) => sched.add(s, sim_now),
                Ok(Command::ResetPrefixCache) => publish(sched.reset_prefix_cache()),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed {
            return;
        }
        if sched.is_idle() {
            sched.metrics.set_state(0, 0, sched.kv_usage(), &[], &[]);
            match rx.recv().await {
                Some(Command::Submit(s)) => {
                    sim_now = sim_now.max(wall_sim(start));
                    sched.add(s, sim_now);
                }
                Some(Command::ResetPrefixCache) => publish(sched.reset_prefix_cache()),
                None => return,
            }
            continue;
        }
        let result = sched.step(sim_now);
        let (run, wait) = sched.lora_sets();
        sched.metrics.set_state(
            sched.num_running(),
            sched.num_waiting(),
            sched.kv_usage(),
            &run,
            &wait,
        );
        if result.duration > 0.0 {
            sim_now += result.duration;
            let target = start + std::time::Duration::from_secs_f64(sim_now / time_scale);
            if target > Instant::now() {
                tokio::time::sleep_until(target).await;
            } else {
                // Behind wall time (large time scales): do not wait for a timer tick.
                tokio::task::yield_now().await;
            }
        } else {
            // Nothing could be scheduled (cannot happen with a validated config); do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        for (tx, out) in result.outputs {
            let _ = tx.send(out);
        }
        publish(result.events);
    }
}
