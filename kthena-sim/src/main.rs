//! `kthena-sim`: run one simulated engine.

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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let sim = kthena_sim::spawn(cli.config).await?;
    tracing::info!(addr = %sim.addr(), model = sim.model(), kv_events_port = ?sim.kv_events_port(), "Engine simulator started.");
    tokio::signal::ctrl_c().await?;
    tracing::info!("Shutting down.");
    sim.shutdown(std::time::Duration::from_secs(5)).await;
    Ok(())
}
