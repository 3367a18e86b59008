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
            let line = one_line(&e);
            let _ = writeln!(std::io::stderr(), "error: {line}");
            ExitCode::FAILURE
        }
    }
}

/// The error as one line, as every error promises. A YAML parser's message adds a source
/// snippet on the lines after its first, which is left out; an API server's message (a
/// webhook's `validation failed:` then one `  - path: message` line per problem) is all
/// reason, so its lines are joined.
fn one_line(e: &anyhow::Error) -> String {
    let text = e.to_string();
    if let Some(kthena_cli::Error::Api { .. }) = e.downcast_ref::<kthena_cli::Error>() {
        let parts: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        return parts.join(" ");
    }
    text.lines().next().unwrap_or_default().to_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a webhook's refusal printed only its first line, `... denied the
    /// request: validation failed:`, without the reason.
    #[test]
    fn an_api_servers_message_keeps_every_line() {
        let e = anyhow::Error::new(kthena_cli::Error::Api {
            code: 400,
            message: "admission webhook \"validate-modelbooster.workload.serving.volcano.sh\" denied the request: validation failed:\n  - spec: the ModelServing x it generates is not valid".to_owned(),
        });
        assert_eq!(
            one_line(&e),
            "the API server answered 400: admission webhook \"validate-modelbooster.workload.serving.volcano.sh\" denied the request: validation failed: - spec: the ModelServing x it generates is not valid"
        );
        let yaml = anyhow::anyhow!("invalid YAML at line 2\n  | foo: [\n  |      ^");
        assert_eq!(one_line(&yaml), "invalid YAML at line 2");
    }
}
