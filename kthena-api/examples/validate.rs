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
//!   document that cannot be parsed.
//!
//! Exits with status 1 if any document is invalid or unparsable, 2 on usage errors.

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
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                writeln!(out, "error {file}: {e}")?;
                failed = true;
                continue;
            }
        };
        for doc in kthena_api::load_str_each(file, &text) {
            match doc {
                Ok(doc) => {
                    let obj = doc.object.with_defaults();
                    if !obj.is_kthena() {
                        writeln!(
                            out,
                            "skip {} {} {}",
                            obj.api_version(),
                            obj.kind(),
                            obj.name()
                        )?;
                        continue;
                    }
                    match obj.validate() {
                        Ok(()) => writeln!(
                            out,
                            "ok {} {} {}/{}",
                            obj.api_version(),
                            obj.kind(),
                            obj.namespace(),
                            obj.name()
                        )?,
                        Err(errors) => {
                            failed = true;
                            for e in errors {
                                writeln!(
                                    out,
                                    "invalid {} {}: {}: {}",
                                    obj.kind(),
                                    obj.name(),
                                    e.path,
                                    e.message
                                )?;
                            }
                        }
                    }
                }
                Err(e) => {
                    failed = true;
                    writeln!(out, "error {e}")?;
                }
            }
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
