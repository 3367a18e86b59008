//! Running the `kthena-controller` binary from a test and reading its log.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// How long a started binary may take to log the line a test waits for.
const LOG_WAIT: Duration = Duration::from_secs(30);

/// Starts `cmd` with stdout piped (stderr inherited, `RUST_LOG=info`, `NO_COLOR`, killed on
/// drop) and waits up to 30 s for the first stdout line containing `message`.
///
/// Returns the child, the rest of its stdout and that line.
///
/// # Errors
/// The spawn's error, the binary exiting before that line, or the 30 s passing.
pub(crate) async fn spawn_until_logged(
    cmd: &mut Command,
    message: &str,
) -> Result<(Child, Lines<BufReader<ChildStdout>>, String)> {
    let mut child = cmd
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let logged = async {
        while let Some(line) = lines.next_line().await? {
            if line.contains(message) {
                return anyhow::Ok(line);
            }
        }
        bail!("the binary ended before logging {message:?}")
    };
    let line = tokio::time::timeout(LOG_WAIT, logged)
        .await
        .with_context(|| format!("{message:?} not logged within 30 s"))??;
    Ok((child, lines, line))
}
