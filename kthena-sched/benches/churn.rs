//! Bounded memory under churn: distinct long prompts through the scheduler's cache-affinity
//! plugins (`prefix-cache` and `kvcache-aware`, configured from a `scheduler:` section as the
//! router does), with the `BlockStored` event an engine would publish for each routed prompt;
//! the process's RSS and both indexes' entry counts are sampled as they churn
//! (`docs/reliability.md`). Fails when RSS grows past the caps' budget or an index holds more
//! entries than its cap.
//!
//! `cargo bench -p kthena-sched --bench churn -- [PROMPTS] [MAX_HASH_CACHE_SIZE] [MAX_INDEX_ENTRIES]`
//! (defaults 1000000, 50000, 262144).

#![allow(
    clippy::print_stdout,
    reason = "a benchmark that prints its measurements"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark reports the wall time it took"
)]

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context as _, bail};
use kthena_sched::{Candidate, Config, KvEvent, Request, Scheduler};

const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

/// Endpoints the prompts are routed over.
const ENDPOINTS: usize = 8;
/// Tokens per prompt: 128 blocks of 16, every block hashed by `kvcache-aware`.
const PROMPT_TOKENS: usize = 2048;
/// Bytes per prompt: 128 blocks of 64 bytes, every block hashed by `prefix-cache`.
const PROMPT_BYTES: usize = 8192;

/// The caps the run is configured with.
#[derive(Debug, Clone, Copy)]
struct Caps {
    /// `prefix-cache` `maxHashCacheSize`, (endpoint, block) entries per endpoint.
    prefix_per_endpoint: usize,
    /// `kvcache-aware` `maxIndexEntries`, (endpoint, block) entries in all.
    kv_entries: usize,
}

fn scheduler(caps: Caps) -> anyhow::Result<Scheduler> {
    let yaml = format!(
        "pluginConfig:
- name: prefix-cache
  args: {{blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: {}, topKMatches: 5}}
- name: kvcache-aware
  args: {{blockSizeToHash: 16, maxBlocksToMatch: 128, maxIndexEntries: {}}}
plugins:
  Score:
    enabled:
    - {{name: least-request, weight: 1}}
    - {{name: prefix-cache, weight: 1}}
    - {{name: kvcache-aware, weight: 1}}
",
        caps.prefix_per_endpoint, caps.kv_entries
    );
    Ok(Scheduler::from_config(&Config::from_yaml(&yaml)?)?)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One sample of the run.
struct Point {
    prompts: usize,
    rss_kib: u64,
    prefix_entries: usize,
    kv_entries: usize,
    secs: f64,
}

/// Prompt `i`: distinct from the first byte and the first token on (no prefix is shared).
fn prompt(i: usize, text: &mut String, tokens: &mut Vec<u32>) {
    text.clear();
    while text.len() < PROMPT_BYTES {
        let _ = write!(text, "{i:016x}:{:08x} ", text.len());
    }
    tokens.clear();
    let base = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    tokens.extend((0..PROMPT_TOKENS as u64).map(|k| (base.wrapping_add(k) % 151_000) as u32));
}

/// Heap bytes per entry at capacity, measured by `cargo bench -p kthena-sched --bench
/// index_memory` (`docs/scheduler.md`): KV index 156, prefix-cache store 100.
const KV_ENTRY_BYTES: f64 = 156.0;
const PREFIX_ENTRY_BYTES: f64 = 100.0;

impl Caps {
    /// What the full indexes should cost, MiB: entries × measured bytes per entry.
    fn budget_mib(self) -> f64 {
        (self.kv_entries as f64 * KV_ENTRY_BYTES
            + (self.prefix_per_endpoint * ENDPOINTS) as f64 * PREFIX_ENTRY_BYTES)
            / (1024.0 * 1024.0)
    }
}

/// Routes `n` distinct prompts and applies, for each, the `BlockStored` event its endpoint
/// would publish; samples every `n / 20` prompts. Returns the markdown report and whether
/// memory stayed bounded: no index ever held more entries than its cap, and RSS at the end is
/// within 5 % (and 8 MiB) of RSS after the first tenth of the prompts, by when both indexes
/// are full.
fn run(n: usize, caps: Caps) -> anyhow::Result<(String, bool)> {
    let sched = scheduler(caps)?;
    let index = sched
        .kv_index()
        .cloned()
        .context("kvcache-aware built no KV index")?;
    let cands: Vec<Candidate> = (0..ENDPOINTS)
        .map(|i| Candidate::new(format!("default/engine-{i}"), MODEL))
        .collect();
    let (mut text, mut tokens) = (String::new(), Vec::new());
    let start = Instant::now();
    let base_rss = rss_kib();
    let mut points = Vec::new();
    let every = (n / 20).max(1);
    for i in 0..n {
        prompt(i, &mut text, &mut tokens);
        let req = Request::new(MODEL)
            .with_prompt(&text)
            .with_token_ids(&tokens);
        let decision = sched.schedule(&req, &cands)?;
        let chosen = &cands[decision.best().index];
        sched.on_scheduled(&req, chosen);
        let block_hashes: Vec<u64> = (0..(PROMPT_TOKENS / 16) as u64)
            .map(|b| ((i as u64) << 8) | b)
            .collect();
        index.apply(
            &chosen.id,
            &KvEvent::BlockStored {
                block_hashes,
                parent_block_hash: None,
                token_ids: tokens.clone(),
                block_size: 16,
            },
        )?;
        if (i + 1) % every == 0 || i + 1 == n {
            points.push(sample(&sched, index.len(), i + 1, start));
        }
    }
    if points.is_empty() {
        bail!("no prompt was routed");
    }
    Ok(report(&points, base_rss, caps))
}

fn sample(sched: &Scheduler, kv_entries: usize, prompts: usize, start: Instant) -> Point {
    let prefix_entries = sched
        .plugin_stats()
        .into_iter()
        .find(|(name, _)| *name == "prefix-cache")
        .and_then(|(_, s)| s.cache_entries)
        .unwrap_or(0);
    Point {
        prompts,
        rss_kib: rss_kib(),
        prefix_entries,
        kv_entries,
        secs: start.elapsed().as_secs_f64(),
    }
}

fn report(points: &[Point], base_rss: u64, caps: Caps) -> (String, bool) {
    let mut s = String::new();
    let prefix_cap = caps.prefix_per_endpoint * ENDPOINTS;
    let _ = writeln!(
        s,
        "Churn: {} distinct prompts ({PROMPT_BYTES} bytes, {PROMPT_TOKENS} tokens each) over \
         {ENDPOINTS} endpoints; caps: prefix-cache {} x {ENDPOINTS} = {prefix_cap} entries, \
         KV index {} entries. RSS before the first prompt: {:.1} MiB.\n",
        points.last().map_or(0, |p| p.prompts),
        caps.prefix_per_endpoint,
        caps.kv_entries,
        base_rss as f64 / 1024.0
    );
    s.push_str("| prompts | RSS (MiB) | prefix-cache entries | KV index entries | elapsed (s) |\n");
    s.push_str("|---|---|---|---|---|\n");
    let last = points.len() - 1;
    for (_, p) in points
        .iter()
        .enumerate()
        .filter(|(k, _)| k % 2 == 1 || *k == last)
    {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {:.0} |",
            p.prompts,
            p.rss_kib as f64 / 1024.0,
            p.prefix_entries,
            p.kv_entries,
            p.secs
        );
    }
    let max = points.iter().map(|p| p.rss_kib).max().unwrap_or(0) as f64 / 1024.0;
    let growth = max - base_rss as f64 / 1024.0;
    let budget = caps.budget_mib();
    let over_cap = points
        .iter()
        .any(|p| p.prefix_entries > prefix_cap || p.kv_entries > caps.kv_entries);
    let tenth = points[(points.len() / 10).saturating_sub(1)].rss_kib as f64 / 1024.0;
    let end = points[last].rss_kib as f64 / 1024.0;
    let flat = end <= tenth * 1.05 || end - tenth <= 8.0;
    let ok = flat && !over_cap;
    let _ = writeln!(
        s,
        "\nRSS ceiling {max:.1} MiB ({growth:.1} MiB over the start; {budget:.1} MiB is the heap \
         of both indexes full at the measured bytes per entry, {KV_ENTRY_BYTES} B per KV entry \
         and {PREFIX_ENTRY_BYTES} B per prefix-cache entry); RSS after a tenth of the prompts \
         {tenth:.1} MiB, at the end {end:.1} MiB; entries over a cap: {}. {}",
        if over_cap { "yes" } else { "never" },
        if ok { "PASS" } else { "FAIL" }
    );
    (s, ok)
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; the numbers are positional.
    let nums: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().with_context(|| format!("{a:?} is not a count")))
        .collect::<anyhow::Result<_>>()?;
    let n = nums.first().copied().unwrap_or(1_000_000);
    let caps = Caps {
        prefix_per_endpoint: nums.get(1).copied().unwrap_or(50_000),
        kv_entries: nums.get(2).copied().unwrap_or(262_144),
    };
    let (report, ok) = run(n, caps)?;
    println!("{report}");
    if !ok {
        bail!("an index went over its cap or RSS kept growing");
    }
    Ok(())
}
