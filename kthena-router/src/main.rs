//! The `kthena-router` binary: parse flags, install tracing, load and validate the config,
//! run the router. Exit code 64 for a bad configuration, 1 for other failures.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use kthena_router::config::Flags;
use kthena_router::{Error, ProcessEnv};

/// mimalloc instead of glibc's allocator: a request allocates and frees many small buffers
/// (headers, labels, JSON), on several threads; mimalloc's thread-local free lists make each
/// of them a few instructions (see `docs/router.md`, Connections and threads).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serving threads: `flag`, else the CPUs the process may use (at least 1).
fn worker_threads(flag: Option<usize>) -> usize {
    flag.filter(|n| *n > 0).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    })
}

fn main() -> ExitCode {
    let args = Flags::parse();
    let filter = args.log_filter(std::env::var("RUST_LOG").ok().as_deref());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,notify=error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    raise_open_files_limit();
    for notice in args.notices() {
        tracing::warn!("{notice}");
    }
    let overrides = args.overrides();
    let (cfg, config_path) = match args.load(&ProcessEnv, std::path::Path::exists) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "Invalid configuration");
            return ExitCode::from(64);
        }
    };
    match &config_path {
        Some(path) => tracing::info!(path = %path.display(), "Configuration file"),
        None => tracing::info!(
            "No configuration file (--config, {}): cluster mode with the built-in defaults",
            kthena_router::config::DEFAULT_CONFIG_PATH
        ),
    }
    let mut cfg = cfg;
    cfg.serving_threads = worker_threads(args.worker_threads);
    tracing::debug!(threads = cfg.serving_threads, "Starting the runtime");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.serving_threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "Cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(kthena_router::run(cfg, config_path, overrides)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(
            e @ (Error::Config { .. }
            | Error::Manifest { .. }
            | Error::Env { .. }
            | Error::ReadFile { .. }
            | Error::AccessLogOpen { .. }),
        ) => {
            tracing::error!(error = %e, "Invalid configuration");
            ExitCode::from(64)
        }
        Err(e) => {
            tracing::error!(error = %e, "Router failed");
            ExitCode::from(1)
        }
    }
}

/// Raises the soft limit on open files to the hard limit, as the Go runtime does for Go
/// Kthena's router: every proxied request holds two sockets, and the usual soft limit of
/// 1,024 would refuse connections at about 500 concurrent requests.
fn raise_open_files_limit() {
    let before = rlimit::getrlimit(rlimit::Resource::NOFILE).map(|(soft, _)| soft);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(now) => {
            if before.as_ref().is_ok_and(|b| *b < now) {
                tracing::debug!(before = ?before.ok(), now, "Raised the open-files limit");
            }
        }
        Err(e) => tracing::warn!(error = %e, "Cannot raise the open-files limit"),
    }
}
