//! The policy scenarios ("the zoo") and their dispatch: a registry of scenario names, each
//! with how to build its [`Scenario`]s, and the run of one command's scenarios (virtual-time
//! rows in [`virtual_rows`], real-time and peer rows in [`real_rows`]), one table each.
//!
//! A new scenario is one [`Entry`] in [`REGISTRY`]: a name (the `--scenario` value), a line
//! for `--help`, and a `build(quick, seed)` that returns the scenarios of that command
//! (several make several tables, as `both` and `saturation` do). Everything else (policies,
//! seeds, direct anchor, peers, SLO column, JSON, charts) follows from the [`Scenario`].

mod agent;
mod real_rows;
mod saturation;
mod virtual_rows;
mod zipf;

use std::io::Write as _;

use anyhow::Context as _;
use kthena_bench::report;
use kthena_bench::scenario::Scenario;

use crate::harness::Runtimes;
use crate::{Args, OVERHEAD, PROMPT_COST, SOAK};

/// One registered scenario command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// The `--scenario` value.
    pub(crate) name: &'static str,
    /// One line for `--help` and the docs.
    pub(crate) about: &'static str,
    /// The scenarios of the command for `(quick, first seed)`, one table each.
    pub(crate) build: fn(bool, u64) -> Vec<Scenario>,
}

/// Every policy scenario, in `--help` order.
pub(crate) const REGISTRY: &[Entry] = &[
    Entry {
        name: "long",
        about: "Go Kthena's published run: 4096-token shared system prompt, 256-token question",
        build: |q, s| vec![Scenario::long(q, s)],
    },
    Entry {
        name: "short",
        about: "Go Kthena's published run: 256-token shared system prompt, 4096-token question",
        build: |q, s| vec![Scenario::short(q, s)],
    },
    Entry {
        name: "both",
        about: "`long` then `short`",
        build: |q, s| vec![Scenario::long(q, s), Scenario::short(q, s)],
    },
    Entry {
        name: "agent",
        about: "multi-turn agent sessions: growing context, think time, 20-28 turns",
        build: agent::build,
    },
    Entry {
        name: "zipf",
        about: "system prompts drawn Zipf (s = 1.1) over 256 prompts",
        build: zipf::build,
    },
    Entry {
        name: "saturation",
        about: "open-loop arrivals near and above the pool's capacity, with a deadline",
        build: saturation::build,
    },
];

/// Every `--scenario` value: the registry's, the engine pools' (`crate::pools`), then
/// `overhead`, `soak` and `prompt-cost`.
pub(crate) fn names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .map(|e| e.name)
        .chain(crate::pools::NAMES)
        .chain([OVERHEAD, SOAK, PROMPT_COST])
        .collect()
}

/// The registry entry of `name`.
pub(crate) fn find(name: &str) -> Option<&'static Entry> {
    REGISTRY.iter().find(|e| e.name == name)
}

/// Runs the scenarios of `args.scenario`: one table (and chart) per scenario, all rows to
/// stdout and to `--json`.
pub(crate) async fn run(args: &Args, rt: &Runtimes) -> anyhow::Result<()> {
    let entry =
        find(&args.scenario).with_context(|| format!("unknown scenario {}", args.scenario))?;
    let tokenizer = match &args.tokenizer {
        Some(p) => kthena_sim::Tokenizer::from_file(p)?,
        None => kthena_sim::Tokenizer::fallback(),
    };
    tracing::info!(scenario = entry.name, about = entry.about, "Running");
    let mut rows = Vec::new();
    for mut sc in (entry.build)(args.quick, args.seed) {
        crate::apply_overrides(args, &mut sc);
        let started = tokio::time::Instant::now();
        let mut scenario_rows = real_rows::run_scenario(args, rt, &sc, &tokenizer).await?;
        report::fill_ratios(&mut scenario_rows);
        tracing::info!(
            scenario = sc.name,
            wall_s = started.elapsed().as_secs_f64(),
            "Scenario done"
        );
        if !args.no_chart {
            std::fs::create_dir_all(&args.chart_dir)
                .with_context(|| format!("creating {}", args.chart_dir.display()))?;
            let path = args.chart_dir.join(format!("{}.png", sc.name));
            match kthena_bench::chart::draw_scenario(&path, &sc.name, &scenario_rows) {
                Ok(()) => eprintln!("chart: {}", path.display()),
                Err(e) => eprintln!("chart {} not drawn: {e}", path.display()),
            }
        }
        rows.extend(scenario_rows);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", report::markdown_table(&rows))?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
