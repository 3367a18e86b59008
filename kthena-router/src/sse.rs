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

use crate::openai::{ResponseProbe, Usage};

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
mod tests {
    use super::*;

    fn push(f: &mut SseFilter, s: &'static [u8]) -> Bytes {
        f.push(Bytes::from_static(s))
    }

    #[test]
    fn a_cut_stream_counts_its_events_and_a_usage_chunk_wins() {
        let mut f = SseFilter::new(false);
        push(
            &mut f,
            b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"cho",
        );
        push(
            &mut f,
            b"ices\":[{\"text\":\"b\"}]}\r\n\r\ndata: {\"choices\":[]}\n\n",
        );
        assert_eq!((f.data_events, f.streamed_output_tokens()), (3, 3));
        push(&mut f, b"data: [DONE]\n\n");
        assert_eq!((f.data_events, f.streamed_output_tokens()), (4, 3));
        let mut f = SseFilter::new(false);
        push(&mut f, b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":9,\"total_tokens\":10}}\n\n");
        assert_eq!(f.streamed_output_tokens(), 9);
    }

    #[test]
    fn sse_filter_hides_injected_usage_chunk() {
        let mut f = SseFilter::new(true);
        let a = push(
            &mut f,
            b"data: {\"choices\":[{\"text\":\"hi\"}],\"usage\":null}\n\ndata: {\"cho",
        );
        assert_eq!(
            &a[..],
            b"data: {\"choices\":[{\"text\":\"hi\"}],\"usage\":null}\n\n"
        );
        let b = push(
            &mut f,
            b"ices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n",
        );
        assert_eq!(&b[..], b"data: [DONE]\n\n");
        assert_eq!(f.output_tokens, 7);
        assert_eq!(
            f.usage,
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 7
            })
        );
        assert!(f.saw_done);
        assert!(f.flush().is_empty());

        let mut keep = SseFilter::new(false);
        let c = push(
            &mut keep,
            b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n",
        );
        assert_eq!(
            &c[..],
            b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
        );
        assert_eq!(keep.output_tokens, 2);
        assert!(push(&mut keep, b"data: partial").is_empty());
        assert_eq!(&keep.flush()[..], b"data: partial");
    }

    #[test]
    fn a_token_chunk_is_forwarded_as_the_same_bytes() {
        let mut f = SseFilter::new(true);
        let chunk = Bytes::from(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\": 1\"}}],\"usage\":null}\n\n"
                .to_vec(),
        );
        let out = f.push(chunk.clone());
        assert_eq!(out.as_ptr(), chunk.as_ptr(), "no copy");
        assert_eq!(out.len(), chunk.len());
        assert_eq!(f.usage, None);
    }

    #[test]
    fn the_blank_line_of_a_dropped_chunk_in_the_next_read_is_dropped() {
        let mut f = SseFilter::new(true);
        let a = push(
            &mut f,
            b"data: {\"choices\":[],\"usage\" : {\"completion_tokens\":5}}\r\n",
        );
        assert!(a.is_empty());
        assert_eq!(
            &push(&mut f, b"\r\ndata: [DONE]\r\n\r\n")[..],
            b"data: [DONE]\r\n\r\n"
        );
        assert_eq!(f.output_tokens, 5);
        assert!(f.saw_done);
    }

    #[test]
    fn a_usage_chunk_amid_token_chunks_is_cut_out() {
        let mut f = SseFilter::new(true);
        let out = push(
            &mut f,
            b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
        );
        assert_eq!(
            &out[..],
            b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(f.output_tokens, 1);
    }

    #[test]
    fn finds_usage_keys_with_values() {
        assert!(has_usage(b"{\"usage\":{\"a\":1}}"));
        assert!(has_usage(b"{\"usage\" :\t{}}"));
        assert!(!has_usage(b"{\"usage\":null}"));
        assert!(!has_usage(b"{\"usage\" : null,\"x\":\"usage\"}"));
        assert!(!has_usage(b"{\"text\":\"\\\"usage\\\"\"}"));
        assert!(has_usage(b"{\"usage\":null,\"response\":{\"usage\":{}}}"));
    }

    /// Regression: a line without an end was held whole (300 MiB of an engine's endless
    /// line made the router 791 MiB resident, and the client got nothing of it).
    #[test]
    fn a_line_longer_than_the_carry_cap_is_forwarded_as_it_arrives() {
        let mut f = SseFilter::new(true);
        let piece = Bytes::from(vec![b'x'; 1000]);
        let mut sent = push(&mut f, b"data: {\"choices\":[{\"text\":\"").len();
        for _ in 0..200 {
            sent += f.push(piece.clone()).len();
            assert!(f.carry.len() <= MAX_CARRY, "{}", f.carry.len());
        }
        // Everything but the last part under the cap has gone out already.
        assert!(sent > 200 * 1000 - MAX_CARRY, "{sent}");
        let end = b"\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":4}}\n\ndata: [DONE]\n\n";
        let out = f.push(Bytes::from_static(end));
        // The long line ends and the usage chunk after it is still read and hidden.
        assert_eq!(&out[..], b"\"}]}\n\ndata: [DONE]\n\n");
        assert_eq!((f.output_tokens, f.saw_done, f.data_events), (4, true, 3));
        assert!(f.flush().is_empty());
    }

    #[test]
    fn an_error_event_is_noted_and_forwarded() {
        let mut f = SseFilter::new(true);
        let ev = b"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\": {\"message\": \"engine exploded\", \"code\": 500}}\n\n";
        assert_eq!(&push(&mut f, ev)[..], ev);
        assert_eq!(f.error_event.as_deref(), Some("engine exploded"));
        let mut old = SseFilter::new(false);
        push(
            &mut old,
            b"data: {\"object\":\"error\",\"message\":\"boom\"}\n\n",
        );
        assert_eq!(old.error_event.as_deref(), Some("boom"));
        // An "error" in the text, or deeper than the top level, is no error event.
        let mut text = SseFilter::new(false);
        push(
            &mut text,
            b"data: {\"choices\":[{\"text\":\"\\\"error\\\": 1\",\"x\":{\"error\":{}}}]}\n\n",
        );
        assert_eq!(text.error_event, None);
    }

    #[test]
    fn trims_line_ends() {
        assert_eq!(trim_eol(b"data: x\r\n"), b"data: x");
        assert_eq!(trim_eol(b"data: x\n"), b"data: x");
        assert_eq!(trim_eol(b"x"), b"x");
    }
}
