//! `kthena`: Kthena CLI for managing AI inference workloads. Also a kubectl plugin when
//! installed as `kubectl-kthena`.

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use kthena_cli::{Cli, Io, run};

fn main() -> ExitCode {
    let mut command = Cli::command();
    let invoked = std::env::args_os().next().map(std::path::PathBuf::from);
    let as_plugin = invoked
        .as_ref()
        .and_then(|p| p.file_stem())
        .is_some_and(|s| s == "kubectl-kthena");
    if as_plugin {
        command = command.bin_name("kubectl kthena");
    }
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::io::stdout().flush();
            // One line, as every error promises: a YAML parser's message adds a source
            // snippet on the lines after its first.
            let text = e.to_string();
            let line = text.lines().next().unwrap_or_default();
            let _ = writeln!(std::io::stderr(), "error: {line}");
            ExitCode::FAILURE
        }
    }
}

/// Output piped into a command that stopped reading (`kthena get templates | head`).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<kthena_cli::Error>(), Some(kthena_cli::Error::Io(io)) if io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn execute(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stdout = std::io::stdout();
    let stdin = std::io::stdin();
    let mut io = Io {
        out: &mut stdout.lock(),
        input: &mut stdin.lock(),
        now: jiff::Timestamp::now(),
    };
    runtime.block_on(run(cli, &mut io))?;
    Ok(())
}
