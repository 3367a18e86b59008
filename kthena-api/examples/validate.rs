//! Validates Kthena manifests the way the API server and admission webhooks would.
//!
//! ```text
//! cargo run -p kthena-api --example validate -- FILE...
//! ```
//!
//! Prints one line per document:
//!
//! * `ok <apiVersion> <kind> <namespace>/<name>` for a valid Kthena object (after defaulting),
//! * `skip <apiVersion> <kind> <name>` for other kinds,
//! * `invalid <kind> <name>: <path>: <message>` once per problem,
//! * `error <file>: document <n>, line <l>, column <c>[, field <path>]: <message>` for a
//!   document (or file) that cannot be read.
//!
//! Unknown fields (which the API server would prune) are reported as warnings on stderr.
//!
//! Exits with status 1 if any document is invalid or unparsable, 2 without arguments.

use std::io::Write as _;
use std::process::ExitCode;

fn main() -> anyhow::Result<ExitCode> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: validate FILE...");
        return Ok(ExitCode::from(2));
    }
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for file in &files {
        match std::fs::read_to_string(file) {
            Ok(text) => {
                let report = kthena_api::validate_manifests(file, &text);
                failed |= report.failed;
                for w in &report.warnings {
                    eprintln!("warning: {w}");
                }
                for line in report.lines {
                    writeln!(out, "{line}")?;
                }
            }
            Err(e) => {
                failed = true;
                writeln!(out, "error {file}: {e}")?;
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
