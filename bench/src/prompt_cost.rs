//! `--scenario prompt-cost`: the router's CPU time per request on long chat prompts, read
//! from the router process itself (`docs/workload-zoo.md`, "Router CPU per long prompt").
//!
//! Four simulated engines run in this process with Hugging Face Qwen3's tokenizer and zero
//! latency: three behind the router (their KV events subscribed to), one reached directly for
//! the time-to-first-byte comparison. The router under test is the `kthena-router` binary as
//! its own process, with the recommended scheduler (least-request + kvcache-aware ×3 +
//! least-prefill) and the same tokenizer configured for the model, so `kvcache-aware`
//! tokenizes exactly as the engines do. With `$KTHENA_ROUTER_BASELINE_BIN` set, that build
//! runs first on its own fresh engines with the same prompts, so before and after come from
//! one run.
//!
//! Two phases, one request at a time:
//! - **unique**: chat prompts of about `--prompt-tokens` tokens, each distinct from its first
//!   byte (a long system message and a short question);
//! - **conversation**: one conversation whose first turn is a long system message and a
//!   question, each later turn the previous messages, the previous answer and a new
//!   question, about `--turn-tokens` new tokens a turn, reaching about `--prompt-tokens`
//!   tokens at the last turn.
//!
//! The router's CPU time is read before each request and again `--settle-ms` after its answer
//! ended (so the KV events the engines publish for it are counted with it), minus the
//! router's idle CPU rate measured before the phases. The same text is also tokenized here
//! by the `tokenizers` crate alone (the floor of any exact tokenizer).

mod proc;
mod text;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kthena_bench::scenario;
use serde::Serialize;

use crate::harness::{self, HttpClient, Runtimes};
use crate::overhead::ZERO_LATENCY_TIME_SCALE;
use text::{Message, Prose, chat_body, send_chat};

/// Options of the prompt-cost mode.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Opts {
    /// Prompt-cost mode: tokens of each unique prompt and of the conversation's last turn.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) prompt_tokens: usize,
    /// Prompt-cost mode: unique prompts sent.
    #[arg(long, default_value_t = 8)]
    pub(crate) unique_prompts: usize,
    /// Prompt-cost mode: turns of the growing conversation.
    #[arg(long, default_value_t = 24)]
    pub(crate) conversation_turns: usize,
    /// Prompt-cost mode: new tokens per turn (the previous answer and the new question).
    #[arg(long, default_value_t = 500)]
    pub(crate) turn_tokens: usize,
    /// Prompt-cost mode: tokens of each answer (part of `--turn-tokens`).
    #[arg(long, default_value_t = 100)]
    pub(crate) answer_tokens: usize,
    /// Prompt-cost mode: the conversation's summary covers this turn and the later ones.
    #[arg(long, default_value_t = 20)]
    pub(crate) summary_from_turn: usize,
    /// Prompt-cost mode: milliseconds between the end of an answer and the CPU reading.
    #[arg(long, default_value_t = 150)]
    pub(crate) settle_ms: u64,
}

/// What the mode needs besides [`Opts`].
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    /// The router binary under test.
    pub(crate) router_bin: PathBuf,
    /// The baseline binary (`$KTHENA_ROUTER_BASELINE_BIN`), run first when set.
    pub(crate) baseline_bin: Option<PathBuf>,
    /// Hugging Face `tokenizer.json` (with `tokenizer_config.json` beside it).
    pub(crate) tokenizer: PathBuf,
    /// Seed of the text.
    pub(crate) seed: u64,
}

/// Qwen3's tokenizer in the shared folder next to the checkout, else under `/work/shared`.
pub(crate) fn default_tokenizer() -> PathBuf {
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3");
    let dir = if local.exists() {
        local
    } else {
        PathBuf::from("/work/shared/tokenizers/qwen3")
    };
    dir.join("tokenizer.json")
}

/// One request's measurements.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    /// Prompt tokens as the engine counted them.
    pub(crate) prompt_tokens: usize,
    /// Router CPU time for the request, milliseconds (idle rate subtracted).
    pub(crate) router_cpu_ms: f64,
    /// Time to first byte through the router, milliseconds.
    pub(crate) ttfb_ms: f64,
    /// Time to first byte of the same-size request sent straight to an engine, milliseconds.
    pub(crate) direct_ttfb_ms: f64,
}

/// One router build's results.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Contender {
    /// `baseline` or `new`.
    pub(crate) label: String,
    /// The binary.
    pub(crate) program: PathBuf,
    /// Idle CPU of the router, milliseconds per second (subtracted from the samples).
    pub(crate) idle_ms_per_s: f64,
    /// The unique prompts, in order.
    pub(crate) unique: Vec<Sample>,
    /// The conversation's turns, in order (turn 1 first).
    pub(crate) turns: Vec<Sample>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// The options.
    pub(crate) prompt_tokens: usize,
    /// First turn of the conversation summary.
    pub(crate) summary_from_turn: usize,
    /// `tokenizers`' `encode` alone on each unique prompt's rendered text, thread CPU ms.
    pub(crate) tokenizer_alone_ms: Vec<f64>,
    /// The baseline (when set), then the build under test.
    pub(crate) contenders: Vec<Contender>,
}

/// The prompts of a run: the unique ones (and their direct twins) and the conversation's.
struct Prompts {
    unique: Vec<(Vec<Message>, Vec<Message>)>,
    system: Message,
    questions: Vec<String>,
}

fn prompts(opts: &Opts, seed: u64) -> Prompts {
    let question = 150.min(opts.prompt_tokens / 2);
    let long = |s: u64| {
        let mut p = Prose::new(s);
        // A nonce first: distinct from the first byte of the content.
        let nonce = format!("Ticket {s:016x}. ");
        vec![
            Message {
                role: "system",
                content: nonce + &p.text(opts.prompt_tokens - question),
            },
            Message {
                role: "user",
                content: p.text(question),
            },
        ]
    };
    let unique = (0..opts.unique_prompts as u64)
        .map(|i| {
            (
                long(seed * 1_000_003 + 2 * i),
                long(seed * 1_000_003 + 2 * i + 1),
            )
        })
        .collect();
    let mut p = Prose::new(seed ^ 0xc0_4e_75);
    let grow = opts.conversation_turns * opts.turn_tokens;
    let system = Message {
        role: "system",
        content: p.text(opts.prompt_tokens.saturating_sub(grow).max(1)),
    };
    let q = opts.turn_tokens.saturating_sub(opts.answer_tokens).max(1);
    let questions = (0..opts.conversation_turns).map(|_| p.text(q)).collect();
    Prompts {
        unique,
        system,
        questions,
    }
}

/// Runs the mode (see the module docs).
///
/// # Errors
/// The tokenizer cannot be loaded, an engine or router cannot start, a request fails.
pub(crate) async fn run(rt: &Runtimes, opts: &Opts, setup: &Setup) -> anyhow::Result<Report> {
    let prompts = prompts(opts, setup.seed);
    let tokenizer_alone_ms = tokenizer_alone(&setup.tokenizer, &prompts)?;
    let mut list = Vec::new();
    if let Some(b) = &setup.baseline_bin {
        list.push(("baseline", b.clone()));
    }
    list.push(("new", setup.router_bin.clone()));
    let mut contenders = Vec::new();
    for (label, program) in list {
        contenders.push(run_one(rt, opts, setup, &prompts, label, program).await?);
    }
    Ok(Report {
        prompt_tokens: opts.prompt_tokens,
        summary_from_turn: opts.summary_from_turn,
        tokenizer_alone_ms,
        contenders,
    })
}

/// `tokenizers`' `encode` (no offsets) on each unique prompt as the chat template renders
/// it, thread CPU milliseconds.
fn tokenizer_alone(path: &Path, prompts: &Prompts) -> anyhow::Result<Vec<f64>> {
    let tok = kthena_tokenize::Tokenizer::from_file(path, 0)?;
    let mut out = Vec::new();
    for (msgs, _) in &prompts.unique {
        let pairs: Vec<(&str, &str)> = msgs.iter().map(|m| (m.role, m.content.as_str())).collect();
        let text = tok.render_chat(&pairs)?;
        let before = thread_cpu_ns();
        let ids = tok
            .hf()
            .encode_fast(text.as_str(), false)
            .map_err(|e| anyhow::anyhow!("tokenizers: {e}"))?;
        out.push(thread_cpu_ns().saturating_sub(before) as f64 / 1e6);
        std::hint::black_box(ids);
    }
    Ok(out)
}

/// CPU time of the calling thread, nanoseconds (`/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn sim_config(tokenizer: &Path) -> kthena_sim::Config {
    let mut cfg = kthena_sim::Config::default()
        .with_model(harness::MODEL)
        .with_time_scale(ZERO_LATENCY_TIME_SCALE);
    cfg.tokenizer = Some(tokenizer.to_owned());
    cfg.profile.num_gpu_blocks = 62_000;
    cfg.profile.max_model_len = 262_144;
    cfg.kv_events_port = Some(0);
    cfg
}

async fn run_one(
    rt: &Runtimes,
    opts: &Opts,
    setup: &Setup,
    prompts: &Prompts,
    label: &str,
    program: PathBuf,
) -> anyhow::Result<Contender> {
    let sims = harness::start_sims(rt, 4, sim_config(&setup.tokenizer)).await?;
    let client = harness::http_client();
    let best = scenario::policies()
        .into_iter()
        .find(|p| p.name == scenario::BEST)
        .map(|p| p.scheduler_yaml)
        .unwrap_or_default();
    let result = async {
        let router =
            proc::RouterProc::start(&program, &sims[..3], &best, &setup.tokenizer, &client).await?;
        tracing::info!(
            label,
            pid = router.pid(),
            debug_port = router.debug_port,
            log = %router.log_path().display(),
            "Router started"
        );
        let m = Measure {
            client: &client,
            router: &router,
            direct: sims[3].base_url(),
            settle: Duration::from_millis(opts.settle_ms),
            idle_ms_per_s: 0.0,
        };
        let m = m.warm_up().await?;
        let unique = m.unique(&prompts.unique).await?;
        let turns = m.conversation(opts, prompts).await?;
        Ok::<_, anyhow::Error>(Contender {
            label: label.to_owned(),
            program: program.clone(),
            idle_ms_per_s: m.idle_ms_per_s,
            unique,
            turns,
        })
    }
    .await;
    harness::stop_sims(rt, sims).await;
    result
}

/// The measuring side of one contender's run.
struct Measure<'a> {
    client: &'a HttpClient,
    router: &'a proc::RouterProc,
    direct: String,
    settle: Duration,
    idle_ms_per_s: f64,
}

impl Measure<'_> {
    /// One short request each way, then the router's idle CPU rate over two seconds.
    async fn warm_up(mut self) -> anyhow::Result<Self> {
        let hi = [Message {
            role: "user",
            content: "Hello!".to_owned(),
        }];
        send_chat(self.client, &self.router.url, chat_body(&hi, 2)).await?;
        send_chat(self.client, &self.direct, chat_body(&hi, 2)).await?;
        tokio::time::sleep(self.settle).await;
        let before = self.router.cpu();
        let t = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.idle_ms_per_s = before.ms_until(self.router.cpu()) / t.elapsed().as_secs_f64();
        Ok(self)
    }

    /// Sends `msgs` straight to the direct engine (`twin`) and then through the router.
    async fn one(
        &self,
        msgs: &[Message],
        twin: &[Message],
        max_tokens: usize,
    ) -> anyhow::Result<(Sample, String)> {
        let direct = send_chat(self.client, &self.direct, chat_body(twin, max_tokens)).await?;
        tokio::time::sleep(self.settle).await;
        let body = chat_body(msgs, max_tokens);
        let before = self.router.cpu();
        let t = tokio::time::Instant::now();
        let reply = send_chat(self.client, &self.router.url, body).await?;
        tokio::time::sleep(self.settle).await;
        let used = before.ms_until(self.router.cpu());
        let idle = self.idle_ms_per_s * t.elapsed().as_secs_f64();
        let sample = Sample {
            prompt_tokens: reply.prompt_tokens,
            router_cpu_ms: (used - idle).max(0.0),
            ttfb_ms: reply.ttfb.as_secs_f64() * 1e3,
            direct_ttfb_ms: direct.ttfb.as_secs_f64() * 1e3,
        };
        Ok((sample, reply.text))
    }

    async fn unique(&self, list: &[(Vec<Message>, Vec<Message>)]) -> anyhow::Result<Vec<Sample>> {
        let mut out = Vec::new();
        for (i, (msgs, twin)) in list.iter().enumerate() {
            let (s, _) = self.one(msgs, twin, 16).await?;
            tracing::info!(
                i,
                cpu_ms = s.router_cpu_ms,
                ttfb_ms = s.ttfb_ms,
                tokens = s.prompt_tokens,
                "Unique prompt"
            );
            out.push(s);
        }
        Ok(out)
    }

    async fn conversation(&self, opts: &Opts, prompts: &Prompts) -> anyhow::Result<Vec<Sample>> {
        let mut msgs = vec![prompts.system.clone()];
        let mut out = Vec::new();
        for (i, q) in prompts.questions.iter().enumerate() {
            msgs.push(Message {
                role: "user",
                content: q.clone(),
            });
            // The same conversation straight to the direct engine: its own cache holds the
            // previous turns too.
            let (s, answer) = self.one(&msgs, &msgs, opts.answer_tokens).await?;
            tracing::info!(
                turn = i + 1,
                cpu_ms = s.router_cpu_ms,
                ttfb_ms = s.ttfb_ms,
                tokens = s.prompt_tokens,
                "Conversation turn"
            );
            out.push(s);
            msgs.push(Message {
                role: "assistant",
                content: answer,
            });
        }
        Ok(out)
    }
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = v
        .into_iter()
        .fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Means of one contender: unique CPU, unique TTFB added, late-turn CPU, late-turn TTFB added.
fn summary(c: &Contender, from_turn: usize) -> [f64; 4] {
    let late: Vec<&Sample> = c.turns.iter().skip(from_turn.saturating_sub(1)).collect();
    [
        mean(c.unique.iter().map(|s| s.router_cpu_ms)),
        mean(c.unique.iter().map(|s| s.ttfb_ms - s.direct_ttfb_ms)),
        mean(late.iter().map(|s| s.router_cpu_ms)),
        mean(late.iter().map(|s| s.ttfb_ms - s.direct_ttfb_ms)),
    ]
}

impl Report {
    /// The markdown tables: one row per build (and their ratio), then every turn.
    pub(crate) fn markdown(&self) -> String {
        let from = self.summary_from_turn;
        let mut s = format!(
            "| router build | unique ~{}k-token prompt: CPU ms/request | TTFB added, ms | conversation turn {from}+: CPU ms/request | TTFB added, ms |\n|---|---|---|---|---|\n",
            self.prompt_tokens / 1000
        );
        let sums: Vec<[f64; 4]> = self.contenders.iter().map(|c| summary(c, from)).collect();
        for (c, v) in self.contenders.iter().zip(&sums) {
            let _ = writeln!(
                s,
                "| {} | {:.1} | {:.1} | {:.2} | {:.1} |",
                c.label, v[0], v[1], v[2], v[3]
            );
        }
        if let [b, n] = sums.as_slice() {
            let r = |i: usize| {
                if n[i] > 0.0 {
                    b[i] / n[i]
                } else {
                    f64::INFINITY
                }
            };
            let _ = writeln!(s, "| baseline / new | {:.1}× | | {:.1}× | |", r(0), r(2));
        }
        let alone = mean(self.tokenizer_alone_ms.iter().copied());
        let _ = writeln!(
            s,
            "\n`tokenizers` alone on the same unique prompts: {alone:.1} ms of CPU per prompt{}.\n",
            sums.last()
                .filter(|_| alone > 0.0)
                .map(|v| format!("; the router (new) spends {:.2}× that", v[0] / alone))
                .unwrap_or_default()
        );
        s.push_str("| turn | prompt tokens |");
        for c in &self.contenders {
            let _ = write!(s, " {} CPU ms | {} TTFB added ms |", c.label, c.label);
        }
        s.push_str("\n|---|---|");
        s.push_str(&"---|---|".repeat(self.contenders.len()));
        s.push('\n');
        let turns = self.contenders.first().map_or(0, |c| c.turns.len());
        for t in 0..turns {
            let tokens = self
                .contenders
                .last()
                .map_or(0, |c| c.turns[t].prompt_tokens);
            let _ = write!(s, "| {} | {tokens} |", t + 1);
            for c in &self.contenders {
                let x = &c.turns[t];
                let _ = write!(
                    s,
                    " {:.2} | {:.1} |",
                    x.router_cpu_ms,
                    x.ttfb_ms - x.direct_ttfb_ms
                );
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests;
