//! `kthena-sim`: run one simulated engine. Exit code 64 for a bad configuration, 1 for other
//! failures; errors are printed as one `error: <message>: <cause>...` line on stderr.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// An LLM inference engine simulator with vLLM's (or SGLang's) HTTP API, metrics and KV
/// events, and a continuous-batching cost model (default: a 7B model on one H100).
#[derive(Debug, Parser)]
#[command(name = "kthena-sim", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    config: kthena_sim::Config,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(cli.config)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the message and its causes on one line, never a backtrace.
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

async fn run(config: kthena_sim::Config) -> anyhow::Result<()> {
    let sim = kthena_sim::spawn(config).await?;
    tracing::info!(addr = %sim.addr(), model = sim.model(), kv_events_port = ?sim.kv_events_port(), "Engine simulator started.");
    tokio::signal::ctrl_c().await?;
    tracing::info!("Shutting down.");
    sim.shutdown(std::time::Duration::from_secs(5)).await;
    Ok(())
}

/// 64 (`EX_USAGE`) for a configuration the simulator refuses, 1 otherwise.
fn exit_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<kthena_sim::Error>() {
        Some(kthena_sim::Error::Config { .. } | kthena_sim::Error::Tokenizer { .. }) => 64,
        _ => 1,
    }
}
