//! The command's terminal: where output goes and answers come from.

use std::io::{BufRead, Write};

use jiff::Timestamp;

/// Where a command writes and reads: standard output and standard input in the binary,
/// buffers in tests. `now` is the time AGE is measured at.
#[derive(Debug)]
pub struct Io<'a, W: Write, R: BufRead> {
    /// Command output.
    pub out: &'a mut W,
    /// Answers to prompts.
    pub input: &'a mut R,
    /// The current time.
    pub now: Timestamp,
}
