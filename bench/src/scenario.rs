//! The benchmark scenarios and the routing policies they compare.

use serde::{Deserialize, Serialize};

use crate::shapes::{Shape, gamma_arrivals};
use crate::workload::{TokenCounter, Workload, WorkloadSpec};

/// One scenario: a workload shape and the client's load settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Name (`long` or `short`).
    pub name: String,
    /// The workload.
    pub workload: WorkloadSpec,
    /// Open-loop arrival rate in requests per model second (SGLang `--request-rate`).
    pub request_rate: f64,
    /// Most requests in flight at once (SGLang `--max-concurrency`).
    pub max_concurrency: usize,
    /// What is sent: [`Shape::SharedPrefix`] generates [`Scenario::workload`]; the other
    /// shapes carry their own spec (`workload` then only names the output length and is
    /// filled from the generated workload).
    #[serde(default)]
    pub shape: Shape,
    /// Gamma shape of the gaps between session arrivals ([`gamma_arrivals`]): 1 (the
    /// default) is Poisson.
    #[serde(default = "poisson")]
    pub arrival_shape: f64,
    /// A request not answered in full this many model seconds after it was sent is
    /// abandoned by the client and counts as failed; `None`: no deadline.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// The TTFT objective, model seconds: the report adds the share of sent requests
    /// answered in full with a TTFT at or below it; `None`: no such column.
    #[serde(default)]
    pub slo_ttft_s: Option<f64>,
    /// How the single-engine anchor (`direct`) takes one engine's share of the load.
    #[serde(default)]
    pub direct: DirectShare,
}

fn poisson() -> f64 {
    1.0
}

/// How the `direct` anchor takes the share of one of `n` engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum DirectShare {
    /// The first `groups / n` groups (perfect prefix affinity; `long`, `short`).
    #[default]
    Groups,
    /// Every `n`th session (independent sessions: each engine serves a third of them).
    Sessions,
    /// No anchor: no split of the load gives one engine a fair share (skewed prefixes).
    None,
}

/// Requests per group of the `long` scenario in `--quick` mode (the published runs use 32).
pub const QUICK_LONG_PROMPTS_PER_GROUP: usize = 8;

/// Requests per group of the `short` scenario in `--quick` mode: its requests cost 17 times
/// more prefill than `long`'s, so it sends fewer to finish in the same time.
pub const QUICK_SHORT_PROMPTS_PER_GROUP: usize = 4;

impl Scenario {
    /// Go Kthena's "long system prompt" run (`docs/kthena/blog/2025-09-09-benchmark/index.md`): 256
    /// groups × 32 prompts, 4096-token system prompt, 256-token question, 128 output tokens, rate
    /// 800, concurrency 300. `quick` keeps every per-request and load parameter and sends
    /// [`QUICK_LONG_PROMPTS_PER_GROUP`] prompts per group instead of 32 (2,048 requests).
    #[must_use]
    pub fn long(quick: bool, seed: u64) -> Self {
        let ppg = if quick {
            QUICK_LONG_PROMPTS_PER_GROUP
        } else {
            32
        };
        Self::published("long", 4096, 256, ppg, seed)
    }

    /// Go Kthena's "short system prompt" run: as [`Scenario::long`] with a 256-token system
    /// prompt and a 4096-token question; `quick` sends [`QUICK_SHORT_PROMPTS_PER_GROUP`]
    /// prompts per group (1,024 requests).
    #[must_use]
    pub fn short(quick: bool, seed: u64) -> Self {
        let ppg = if quick {
            QUICK_SHORT_PROMPTS_PER_GROUP
        } else {
            32
        };
        Self::published("short", 256, 4096, ppg, seed)
    }

    fn published(name: &str, system: usize, question: usize, ppg: usize, seed: u64) -> Self {
        Self {
            name: name.to_owned(),
            workload: WorkloadSpec {
                num_groups: 256,
                prompts_per_group: ppg,
                system_prompt_len: system,
                question_len: question,
                output_len: 128,
                turns: 1,
                seed,
            },
            request_rate: 800.0,
            max_concurrency: 300,
            shape: Shape::SharedPrefix,
            arrival_shape: 1.0,
            timeout_s: None,
            slo_ttft_s: None,
            direct: DirectShare::Groups,
        }
    }

    /// The workload of `seed` ([`Shape::generate`] of [`Scenario::shape`]).
    #[must_use]
    pub fn generate(&self, seed: u64, counter: &dyn TokenCounter) -> Workload {
        self.shape.generate(self.workload, seed, counter)
    }

    /// Arrival times of `n` sessions at `rate` per second with [`Scenario::arrival_shape`].
    #[must_use]
    pub fn arrivals(&self, n: usize, rate: f64, seed: u64) -> Vec<f64> {
        gamma_arrivals(n, rate, self.arrival_shape, seed)
    }

    /// `workload` cut to one engine's share of `engines` ([`Scenario::direct`]); `None`
    /// without an anchor.
    #[must_use]
    pub fn direct_share(&self, workload: &Workload, engines: usize) -> Option<Workload> {
        let n = engines.max(1);
        match self.direct {
            DirectShare::Groups => Some(
                workload
                    .clone()
                    .with_groups(workload.spec.num_groups.div_ceil(n)),
            ),
            DirectShare::Sessions => Some(workload.clone().every_nth(n)),
            DirectShare::None => None,
        }
    }
}

/// A routing policy: a name and the router's `scheduler:` section (Kthena's format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Name used in the report.
    pub name: String,
    /// The `scheduler:` section, YAML, indented to sit under `scheduler:`.
    pub scheduler_yaml: String,
    /// Whether the policy needs the engines' KV events.
    pub needs_kv_events: bool,
}

fn scores(plugins: &[(&str, u32)]) -> String {
    let mut s = String::from("  plugins:\n    Score:\n      enabled:\n");
    for (name, w) in plugins {
        s.push_str(&format!("      - {{name: {name}, weight: {w}}}\n"));
    }
    s
}

/// `pluginConfig` of the cache plugins: Go Kthena's defaults for `prefix-cache`; for
/// `kvcache-aware`, hashing blocks of the engines' block size (16 tokens, as the published
/// run matched vLLM's block size 128 with `blockSizeToHash: 128`).
const CACHE_ARGS: &str = "  pluginConfig:
  - name: prefix-cache
    args: {blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5}
  - name: kvcache-aware
    args: {blockSizeToHash: 16, maxBlocksToMatch: 128}
";

/// KV-cache blocks (16 tokens each) of every engine in the `long` and `short` scenarios:
/// 448,000 tokens, what vLLM leaves for the KV cache of a 7B model with 57,344 B/token
/// (Qwen2-7B: 2 × 28 layers × 4 KV heads × 128 × 2 B) on a 48 GB GPU at
/// `gpu_memory_utilization` 0.9 (43.2 GB − 15.2 GB of weights − ~2.5 GB of activations).
///
/// The published run does not name its GPU, but its random row (2.15 s TTFT, 2.73× below
/// `kvcache-aware`) needs engines whose cache holds well under the 1.05 M tokens of the 256
/// system prompts: with the simulator's H100 profile (62,000 blocks, 992,000 tokens) every
/// engine ends up caching most prompts whatever the routing, and no policy can exceed about
/// 2.1× random (`docs/benchmarks.md`).
pub const BENCH_GPU_BLOCKS: usize = 28_000;

/// The name of the recommended combination in the report
/// ([`kthena_router::config::SchedulerConfig::recommended`], shipped in `deploy/router/configmap.yaml`).
pub const BEST: &str = "best: least-request + kvcache-aware + least-prefill x3";

/// The name of the Kthena Helm chart's default scheduler section in the report
/// ([`kthena_router::config::SchedulerConfig::default`]: `least-request` filter; `least-request`,
/// `gpu-usage`, `least-latency`, `prefix-cache` scores).
pub const CHART_DEFAULT: &str = "Kthena chart default";

/// Every policy of the published table, in its order, then the Kthena chart's default
/// section, then our best combination.
///
/// The single-plugin policies and the `least-request + X` pairs use weight 1 each and no
/// filter, as the published table names only score plugins. The best combination weighs
/// `least-prefill` 3 against `least-request` 1 and `kvcache-aware` 1: the cost of
/// `least-prefill` (queued prefill, requests decoding, and this request's tokens the
/// endpoint does not hold) decides, so a long cached prefix keeps its endpoint while a
/// short shared one spills to a less loaded endpoint; `kvcache-aware` breaks near-ties
/// toward the endpoint holding more of the prompt. `docs/benchmarks.md` lists the other
/// combinations measured.
#[must_use]
pub fn policies() -> Vec<Policy> {
    let p = |name: &str, yaml: String, kv: bool| Policy {
        name: name.to_owned(),
        scheduler_yaml: yaml,
        needs_kv_events: kv,
    };
    vec![
        p("random", scores(&[("random", 1)]), false),
        p("least-request", scores(&[("least-request", 1)]), false),
        p("gpu-usage", scores(&[("gpu-usage", 1)]), false),
        p("least-latency", scores(&[("least-latency", 1)]), false),
        p(
            "least-request+prefix-cache",
            format!(
                "{CACHE_ARGS}{}",
                scores(&[("least-request", 1), ("prefix-cache", 1)])
            ),
            false,
        ),
        p(
            "least-request+kvcache-aware",
            format!(
                "{CACHE_ARGS}{}",
                scores(&[("least-request", 1), ("kvcache-aware", 1)])
            ),
            true,
        ),
        p(
            CHART_DEFAULT,
            format!(
                "  {}\n",
                serde_json::to_string(&kthena_router::config::SchedulerConfig::default())
                    .unwrap_or_default()
            ),
            false,
        ),
        p(
            BEST,
            format!(
                "{CACHE_ARGS}{}",
                scores(&[
                    ("least-request", 1),
                    ("kvcache-aware", 1),
                    ("least-prefill", 3)
                ])
            ),
            true,
        ),
    ]
}

#[cfg(test)]
mod tests;
