//! `kthena-sim`: run one simulated engine, or (`kthena-sim node`) a simulated node that runs
//! an engine for each pod of a Kubernetes cluster. Exit code 64 for a bad configuration, 1
//! for other failures; errors are printed as one `error: <message>: <cause>...` line on
//! stderr.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// An LLM inference engine simulator with vLLM's (or SGLang's) HTTP API, metrics and KV
/// events, and a continuous-batching cost model (default: a 7B model on one H100).
#[derive(Debug, Parser)]
#[command(name = "kthena-sim", version, about, long_about = None, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Seconds that in-flight requests get to finish on SIGTERM or Ctrl-C (vLLM's
    /// `--shutdown-timeout`): new connections are refused and new requests answered 503 at
    /// once; what is still open after this is cut.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    shutdown_timeout: f64,
    #[command(flatten)]
    config: kthena_sim::Config,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a simulated node: watch the pods of a cluster (selected by node name, namespace
    /// and/or labels) and run an engine for each on its own loopback address, writing the
    /// pods' status (podIP, Running, Ready).
    Node(NodeArgs),
}

#[derive(Debug, clap::Args)]
struct NodeArgs {
    /// Kubeconfig of the cluster; default: `$KUBECONFIG`, `~/.kube/config`, in-cluster.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Only pods whose `spec.nodeName` is this.
    #[arg(long)]
    node_name: Option<String>,
    /// Only pods of this namespace (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Only pods matching this label selector, e.g. `app=vllm`.
    #[arg(long)]
    selector: Option<String>,
    /// Directory of the `kthena-router`, `kthena-controller`, `kthena` and `kthena-sim`
    /// binaries that run the pods whose image is one of ours (`.../kthena-router:TAG`, ...)
    /// [default: the directory of this `kthena-sim`].
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Directory holding one directory per such pod: its volumes, token, kubeconfig and
    /// the processes' logs (`<namespace>_<name>_<uid>/<container>.log`)
    /// [default: `$TMPDIR/kthena-sim-node`].
    #[arg(long, value_name = "DIR")]
    pods_dir: Option<PathBuf>,
    /// Default engine flags (model and port come from each pod).
    #[command(flatten)]
    engine: kthena_sim::Config,
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
        .and_then(|rt| {
            rt.block_on(async {
                match cli.command {
                    Some(Command::Node(args)) => run_node(args).await,
                    None => run(cli.config, cli.shutdown_timeout).await,
                }
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the message and its causes on one line, never a backtrace.
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

async fn run(config: kthena_sim::Config, shutdown_timeout: f64) -> anyhow::Result<()> {
    let grace = std::time::Duration::try_from_secs_f64(shutdown_timeout)
        .map_err(|e| anyhow::anyhow!("--shutdown-timeout {shutdown_timeout}: {e}"))?;
    let sim = kthena_sim::spawn(config).await?;
    tracing::info!(addr = %sim.addr(), model = sim.model(), kv_events_port = ?sim.kv_events_port(), "Engine simulator started.");
    stop_signal().await?;
    tracing::info!(in_flight = sim.in_flight(), "Shutting down: draining.");
    if sim.drain(grace).await {
        tracing::info!("Drained.");
    } else {
        tracing::warn!(
            ?grace,
            "Requests still open at the shutdown timeout were cut."
        );
    }
    Ok(())
}

/// SIGTERM or SIGINT (Ctrl-C).
async fn stop_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

async fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let processes = kthena_sim::node::ProcessConfig {
        bin_dir: match args.bin_dir {
            Some(dir) => dir,
            None => own_dir()?,
        },
        pods_dir: args
            .pods_dir
            .unwrap_or_else(|| std::env::temp_dir().join("kthena-sim-node")),
        api_server: kthena_sim::node::ApiServer::from_kube_config(&config),
    };
    let client = kube::Client::try_from(config)?;
    tracing::info!(bin_dir = %processes.bin_dir.display(), pods_dir = %processes.pods_dir.display(), "Simulated node started.");
    let node = kthena_sim::node::SimNode::start(
        client,
        kthena_sim::node::NodeConfig {
            node_name: args.node_name,
            namespace: args.namespace,
            selector: args.selector,
            engine: args.engine.validate()?,
            processes: Some(processes),
            ..Default::default()
        },
    );
    stop_signal().await?;
    tracing::info!("Shutting down.");
    node.stop().await;
    Ok(())
}

/// The directory of the running binary.
fn own_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .map(std::path::Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("{} has no directory", exe.display()))
}

/// 64 (`EX_USAGE`) for a configuration the simulator refuses, 1 otherwise.
fn exit_code(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<kthena_sim::Error>() {
        Some(kthena_sim::Error::Config { .. } | kthena_sim::Error::Tokenizer { .. }) => 64,
        _ => 1,
    }
}
