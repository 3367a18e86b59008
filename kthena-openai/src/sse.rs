//! The SSE filter of streamed answers: forwards each upstream chunk's complete lines as they
//! arrive, reads `usage`, notes `data: [DONE]`, and drops the usage-only chunk (empty
//! `choices`) when the router asked for usage on the client's behalf.
//!
//! It reads only what it must. A chunk of complete lines that holds no `"usage"` key with a
//! non-`null` value and no `[DONE]` (every token chunk of a vLLM or SGLang stream) is
//! forwarded as the same [`Bytes`], without a copy, a JSON parse or an allocation: two
//! SIMD substring searches (`memchr::memmem`) decide it. Only the lines of the rare chunks
//! that match (the final usage chunk, `[DONE]`) are parsed, with
//! [`ResponseProbe`]. A line split across upstream reads is joined in a small carry buffer
//! (a copy, not in steady state); a line longer than 64 KiB is forwarded as it arrives,
//! unread. A `usage` key spelt with JSON escapes (`"\u0075sage"`) is
//! not recognised; no engine writes one.

use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use memchr::memmem::Finder;

use crate::response::{ResponseProbe, Usage};

static USAGE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));
static DONE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"[DONE]"));
static ERROR_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));
/// A `data:` line after the first line of a chunk (JSON has no raw line feed, so this is
/// always a line start).
static DATA_LINE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\ndata:"));

/// Longest start of a line held back while its end has not arrived, in bytes. A longer line
/// cannot be a chunk the filter must read (a usage-only chunk or `[DONE]` is a few hundred
/// bytes): it is forwarded as it arrives, unread, so an engine's endless line neither grows
/// the router's memory nor holds the client's stream.
const MAX_CARRY: usize = 64 * 1024;

/// Line-based SSE pass-through (see the module doc).
///
/// Feed it every upstream chunk with [`SseFilter::push`] and forward what it returns; at
/// the end of the stream forward [`SseFilter::flush`].
#[derive(Debug, Default)]
pub struct SseFilter {
    hide_usage_chunk: bool,
    /// The start of a line whose end has not arrived yet (empty in steady state).
    carry: BytesMut,
    /// The blank line that ends a dropped usage chunk is still to be dropped.
    skip_blank: bool,
    /// A line longer than [`MAX_CARRY`] is being forwarded unread, up to its end.
    long_line: bool,
    /// `usage.completion_tokens` of the last chunk that carried usage.
    pub output_tokens: u64,
    /// The usage of the last chunk that carried usage (prompt and completion tokens): what
    /// the router counts and charges for the request.
    pub usage: Option<Usage>,
    /// A `data: [DONE]` line was seen.
    pub saw_done: bool,
    /// The message of the first error event the engine sent in the stream (vLLM's
    /// `data: {"error": {"message": ...}}`, or `{"object": "error", "message": ...}`).
    pub error_event: Option<String>,
    /// `data:` lines forwarded so far, `[DONE]` and a usage chunk included: an engine
    /// streams one token per event (vLLM and SGLang by default), so this bounds the tokens a
    /// client received when the stream ends before its usage chunk.
    pub data_events: u64,
}

impl SseFilter {
    /// A filter; `hide_usage_chunk` drops the usage-only chunk.
    #[must_use]
    pub fn new(hide_usage_chunk: bool) -> Self {
        Self {
            hide_usage_chunk,
            ..Self::default()
        }
    }

    /// Feeds one upstream chunk; returns the bytes to forward now: its complete lines (the
    /// chunk itself, not a copy, when it ends with a line end and nothing in it is dropped),
    /// empty while a line is incomplete.
    pub fn push(&mut self, mut chunk: Bytes) -> Bytes {
        if self.long_line {
            return self.pass_long_line(chunk);
        }
        let Some(last_nl) = memchr::memrchr(b'\n', &chunk) else {
            self.carry.extend_from_slice(&chunk);
            return self.cap_carry(Bytes::new());
        };
        let out = if self.carry.is_empty() {
            if last_nl + 1 < chunk.len() {
                self.carry.extend_from_slice(&chunk[last_nl + 1..]);
                chunk.truncate(last_nl + 1);
            }
            self.lines(chunk)
        } else {
            // A line began in an earlier chunk: join it.
            self.carry.extend_from_slice(&chunk[..=last_nl]);
            let complete = self.carry.split().freeze();
            self.carry.extend_from_slice(&chunk[last_nl + 1..]);
            self.lines(complete)
        };
        self.cap_carry(out)
    }

    /// `out`, and the held-back start of a line when it passed [`MAX_CARRY`]: that line is
    /// forwarded from now on as it arrives.
    fn cap_carry(&mut self, out: Bytes) -> Bytes {
        if self.carry.len() <= MAX_CARRY {
            return out;
        }
        self.long_line = true;
        self.skip_blank = false;
        let head = self.carry.split().freeze();
        self.data_events += u64::from(head.starts_with(b"data:"));
        join(out, head)
    }

    /// A chunk of a long line: forwarded up to the line's end; the rest is read as usual.
    fn pass_long_line(&mut self, chunk: Bytes) -> Bytes {
        let Some(nl) = memchr::memchr(b'\n', &chunk) else {
            return chunk;
        };
        self.long_line = false;
        let end = chunk.slice(..=nl);
        let rest = self.push(chunk.slice(nl + 1..));
        join(end, rest)
    }

    /// The output tokens of a stream: `usage.completion_tokens` when a usage chunk came,
    /// else an estimate of one token per event (the `data:` lines forwarded, `[DONE]` not
    /// counted), so that the access log and the output token rate limit still see what a
    /// client that went away, whose engine failed, or whose engine sent no usage chunk was
    /// streamed.
    #[must_use]
    pub fn streamed_output_tokens(&self) -> u64 {
        match self.usage {
            Some(_) => self.output_tokens,
            None => self.data_events.saturating_sub(u64::from(self.saw_done)),
        }
    }

    /// The incomplete last line, at the end of the stream.
    pub fn flush(&mut self) -> Bytes {
        self.carry.split().freeze()
    }

    /// Complete lines: forwarded as they are unless one must be read.
    fn lines(&mut self, mut complete: Bytes) -> Bytes {
        if std::mem::take(&mut self.skip_blank) {
            // The dropped chunk's blank line came in this read.
            if complete.starts_with(b"\n") {
                complete = complete.slice(1..);
            } else if complete.starts_with(b"\r\n") {
                complete = complete.slice(2..);
            }
        }
        self.data_events += u64::from(complete.starts_with(b"data:"))
            + DATA_LINE.find_iter(&complete).count() as u64;
        if DONE.find(&complete).is_none() && !has_usage(&complete) && !has_error(&complete) {
            return complete;
        }
        self.read_lines(complete)
    }

    /// The slow path: reads line by line, copying only when a line is dropped.
    fn read_lines(&mut self, complete: Bytes) -> Bytes {
        let mut out: Option<BytesMut> = None;
        let mut start = 0;
        for line in complete.split_inclusive(|b| *b == b'\n') {
            let keep = self.read_line(trim_eol(line));
            match (&mut out, keep) {
                (None, true) | (Some(_), false) => {}
                (None, false) => {
                    let mut o = BytesMut::with_capacity(complete.len());
                    o.extend_from_slice(&complete[..start]);
                    out = Some(o);
                }
                (Some(o), true) => o.extend_from_slice(line),
            }
            start += line.len();
        }
        out.map_or(complete, BytesMut::freeze)
    }

    /// Reads one line (without its end); `false` when it is dropped.
    fn read_line(&mut self, text: &[u8]) -> bool {
        if std::mem::take(&mut self.skip_blank) && text.is_empty() {
            return false;
        }
        let Some(payload) = text.strip_prefix(b"data:") else {
            return true;
        };
        let payload = payload.trim_ascii();
        if payload == b"[DONE]" {
            self.saw_done = true;
            return true;
        }
        if self.error_event.is_none() && has_error(payload) {
            self.error_event = error_message(payload);
        }
        if !has_usage(payload) {
            return true;
        }
        let Some(p) = ResponseProbe::parse(payload) else {
            return true;
        };
        if let Some(u) = p.usage() {
            self.output_tokens = u.completion_tokens;
            self.usage = Some(u);
        }
        if self.hide_usage_chunk && p.usage_only() {
            self.skip_blank = true;
            return false;
        }
        true
    }
}

/// Whether `bytes` hold a `"usage"` key whose value is not `null` (a quoted `"usage"`
/// followed by `:` is a key: inside a JSON string a quote is escaped).
fn has_usage(bytes: &[u8]) -> bool {
    USAGE_KEY.find_iter(bytes).any(|at| {
        let rest = bytes[at + b"\"usage\"".len()..].trim_ascii_start();
        rest.strip_prefix(b":")
            .is_some_and(|v| !v.trim_ascii_start().starts_with(b"null"))
    })
}

/// Whether `bytes` hold an `"error"` key (quoted and followed by `:`) or an
/// `"object": "error"` member.
fn has_error(bytes: &[u8]) -> bool {
    ERROR_KEY.find_iter(bytes).any(|at| {
        let key = bytes[at + b"\"error\"".len()..]
            .trim_ascii_start()
            .starts_with(b":");
        let object = bytes[..at]
            .trim_ascii_end()
            .strip_suffix(b":")
            .is_some_and(|b| b.trim_ascii_end().ends_with(b"\"object\""));
        key || object
    })
}

/// The message of an error event: `{"error": {"message": ...}}` or `{"object": "error",
/// "message": ...}`; `None` for any other JSON (a key named `error` deeper in a chunk).
fn error_message(payload: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let e = match v.get("error") {
        Some(e) if e.is_object() => e,
        _ if v.get("object").and_then(serde_json::Value::as_str) == Some("error") => &v,
        _ => return None,
    };
    let message = e.get("message").and_then(serde_json::Value::as_str);
    Some(message.unwrap_or("no message").to_owned())
}

/// `a` then `b` (a copy only when both hold bytes).
fn join(a: Bytes, b: Bytes) -> Bytes {
    match (a.is_empty(), b.is_empty()) {
        (_, true) => a,
        (true, false) => b,
        (false, false) => [a, b].concat().into(),
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let l = line.strip_suffix(b"\n").unwrap_or(line);
    l.strip_suffix(b"\r").unwrap_or(l)
}

#[cfg(test)]
mod tests;
