//! The access log: one line per `/v1/*` request after it completed, in Go Kthena's text or
//! JSON format (`pkg/kthena-router/accesslog/*`).

use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;

use crate::config::{AccessLogConfig, AccessLogFormat};
use crate::error::{Error, Result};

/// One access-log entry. Empty strings and zero numbers are left out of the line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Entry {
    /// Start time, RFC 3339 with nanoseconds, UTC.
    pub timestamp: String,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// `HTTP/1.1`, `HTTP/2.0`.
    pub protocol: String,
    /// Status sent to the client.
    pub status_code: u16,
    /// `{type, message}` of the error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<EntryError>,
    /// The request's model (always present in JSON).
    pub model_name: String,
    /// `namespace/name` of the matched ModelRoute.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model_route: String,
    /// `namespace/name` of the ModelServer.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model_server: String,
    /// The endpoint that served the request (the last attempt's; Go logs the first ranked).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub selected_pod: String,
    /// `x-request-id`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub request_id: String,
    /// The authenticated user (the JWT's `sub`; not in Go Kthena's log).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_id: String,
    /// `model_server`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub backend_type: String,
    /// `namespace/name` of the backend.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub backend_name: String,
    /// The model sent upstream.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub upstream_model: String,
    /// Status of the last upstream answer.
    #[serde(skip_serializing_if = "is_zero_u16")]
    pub upstream_status_code: u16,
    /// Number of upstream attempts.
    #[serde(skip_serializing_if = "is_zero_usize")]
    pub upstream_attempts: usize,
    /// `upstream` or `downstream` or `internal` for errors.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error_origin: String,
    /// `namespace/name` of the Gateway whose listener took the request (Gateway API mode).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gateway: String,
    /// `namespace/name` of the HTTPRoute that matched (Inference Extension).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub http_route: String,
    /// `namespace/name` of the InferencePool the request went to (Inference Extension).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub inference_pool: String,
    /// Input tokens (estimate or engine-reported).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub input_tokens: u64,
    /// Output tokens reported by the engine.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub output_tokens: u64,
    /// Total duration, ms.
    pub duration_total: u64,
    /// Request processing (parse, match, schedule), ms.
    pub duration_request_processing: u64,
    /// Upstream (first attempt sent to the response headers of the last), ms.
    pub duration_upstream_processing: u64,
    /// Response processing (streaming the body), ms.
    pub duration_response_processing: u64,
}

/// The `error` object of an entry.
#[derive(Debug, Clone, Serialize)]
pub struct EntryError {
    /// Finish reason (`route_not_found`, `proxy`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Human message.
    pub message: String,
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_usize(v: &usize) -> bool {
    *v == 0
}

// === impl Entry ===

impl Entry {
    /// Go Kthena's text line:
    /// `[ts] "METHOD path proto" status[ error=t:m][ k=v]...[ tokens=in/out] timings=T ms(a+b+c)`,
    /// every value written through [`escape_value`] (and the request line's parts through
    /// [`escape`]), so that no client-controlled byte can end the line or add a field.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "[{}] \"{} {} {}\" {}",
            self.timestamp,
            escape(&self.method),
            escape(&self.path),
            escape(&self.protocol),
            self.status_code
        );
        if let Some(e) = &self.error {
            let _ = write!(
                s,
                " error={}",
                escape_value(&format!("{}:{}", e.kind, e.message))
            );
        }
        let pairs = [
            ("model_name", &self.model_name),
            ("model_route", &self.model_route),
            ("model_server", &self.model_server),
            ("selected_pod", &self.selected_pod),
            ("request_id", &self.request_id),
            ("user_id", &self.user_id),
            ("backend_type", &self.backend_type),
            ("backend_name", &self.backend_name),
            ("upstream_model", &self.upstream_model),
        ];
        for (k, v) in pairs {
            if !v.is_empty() {
                let _ = write!(s, " {k}={}", escape_value(v));
            }
        }
        if self.upstream_status_code > 0 {
            let _ = write!(s, " upstream_status_code={}", self.upstream_status_code);
        }
        if self.upstream_attempts > 0 {
            let _ = write!(s, " upstream_attempts={}", self.upstream_attempts);
        }
        if !self.error_origin.is_empty() {
            let _ = write!(s, " error_origin={}", escape_value(&self.error_origin));
        }
        for (k, v) in [
            ("gateway", &self.gateway),
            ("http_route", &self.http_route),
            ("inference_pool", &self.inference_pool),
        ] {
            if !v.is_empty() {
                let _ = write!(s, " {k}={}", escape_value(v));
            }
        }
        if self.input_tokens > 0 || self.output_tokens > 0 {
            let _ = write!(s, " tokens={}/{}", self.input_tokens, self.output_tokens);
        }
        let _ = write!(
            s,
            " timings={}ms({}+{}+{})",
            self.duration_total,
            self.duration_request_processing,
            self.duration_upstream_processing,
            self.duration_response_processing
        );
        s
    }

    /// One JSON object.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `v` with nginx's `escape=default`: `"`, `\\`, control bytes (below 0x20, 0x7F) and bytes
/// of 0x80 and above (non-ASCII UTF-8, so no terminal or bidirectional control character
/// either) as `\xHH` (two upper-case hex digits); everything else as it is. Unescaping
/// every `\xHH` gives the bytes back.
#[must_use]
pub(crate) fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    let plain = |b: u8| (0x20..0x7F).contains(&b) && b != b'"' && b != b'\\';
    if v.bytes().all(plain) {
        return std::borrow::Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 8);
    for b in v.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A `key=value` field's value: [`escape`]d, and in double quotes when it contains a space
/// or `=` (or is empty), so that it cannot read as more than one field. A quoted value holds
/// no `"` (escaped as `\x22`): it ends at the next `"`.
#[must_use]
pub(crate) fn escape_value(v: &str) -> std::borrow::Cow<'_, str> {
    let e = escape(v);
    if e.is_empty() || e.contains([' ', '=']) {
        std::borrow::Cow::Owned(format!("\"{e}\""))
    } else {
        e
    }
}

/// Access-log entries waiting for the writer thread at most (about 6 s of a 5,000 req/s
/// router). When the output cannot keep up (a full stdout pipe, a stalled disk), entries
/// beyond this are dropped and counted in `kthena_router_access_log_dropped_total` instead
/// of stalling the requests that finish.
pub(crate) const ACCESS_LOG_QUEUE: usize = 32_768;

/// How long [`AccessLog::flush`] waits for the writer thread at most.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes entries to stdout, stderr or a file (append) from its own thread.
///
/// [`AccessLog::write`] only queues the entry (no formatting, no system call, no lock on
/// the request path); the `access-log` thread formats what is queued, writes it in one
/// buffered batch and flushes after each batch, so a line lands within microseconds of its
/// request when the output keeps up. Dropping the log (the last `Arc`) writes what is
/// queued and joins the thread.
#[derive(Debug)]
pub struct AccessLog {
    /// `None` when the log is disabled.
    tx: Option<SyncSender<Msg>>,
    writer: Option<JoinHandle<()>>,
    dropped: Counter,
    /// A [`flush`](Self::flush) already waited [`FLUSH_TIMEOUT`] for an output that took
    /// nothing: dropping the log does not wait for it again.
    stalled: std::sync::atomic::AtomicBool,
}

/// What the writer thread is sent.
enum Msg {
    /// One entry to write.
    Entry(Box<Entry>),
    /// Answer once everything sent before is written and flushed.
    Flush(SyncSender<()>),
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Entry(_) => "Entry",
            Self::Flush(_) => "Flush",
        })
    }
}

enum Output {
    Stdout,
    Stderr,
    File(std::fs::File),
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            // The whole batch under one lock: no tracing line in the middle of an entry.
            Self::Stdout => std::io::stdout().lock().write_all(buf).map(|()| buf.len()),
            Self::Stderr => std::io::stderr().lock().write_all(buf).map(|()| buf.len()),
            Self::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout => std::io::stdout().lock().flush(),
            Self::Stderr => std::io::stderr().lock().flush(),
            Self::File(f) => f.flush(),
        }
    }
}

impl AccessLog {
    /// Opens the configured output (a path is created with mode 0644 and appended to) and,
    /// when the log is enabled, starts its writer thread. `dropped` counts entries dropped
    /// because [`ACCESS_LOG_QUEUE`] entries were already waiting.
    ///
    /// # Errors
    /// [`Error::AccessLogOpen`] when the file cannot be opened for appending;
    /// [`Error::Io`] when the writer thread cannot be started.
    pub fn open(cfg: &AccessLogConfig, dropped: Counter) -> Result<Self> {
        let out = match cfg.output.as_str() {
            "stdout" | "" => Output::Stdout,
            "stderr" => Output::Stderr,
            path => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| Error::AccessLogOpen {
                        path: path.into(),
                        source,
                    })?;
                Output::File(f)
            }
        };
        if !cfg.enabled {
            return Ok(Self {
                tx: None,
                writer: None,
                dropped,
                stalled: false.into(),
            });
        }
        let (tx, rx) = sync_channel(ACCESS_LOG_QUEUE);
        let format = cfg.format;
        let writer = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || write_loop(&rx, out, format))?;
        Ok(Self {
            tx: Some(tx),
            writer: Some(writer),
            dropped,
            stalled: false.into(),
        })
    }

    /// Whether entries are written at all.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// A new entry for a request to `path`. When the log is written it also holds the
    /// timestamp (RFC 3339, now), `method`, the protocol (`protocol()`, e.g. `HTTP/1.1`) and
    /// `request_id`; when it is off only `path`, which the request metrics read too, so a
    /// request makes no string only the log would read.
    pub(crate) fn request_entry(
        &self,
        path: String,
        method: &str,
        protocol: impl FnOnce() -> String,
        request_id: &str,
    ) -> Entry {
        if !self.enabled() {
            return Entry {
                path,
                ..Entry::default()
            };
        }
        Entry {
            timestamp: now_rfc3339(),
            method: method.to_owned(),
            path,
            protocol: protocol(),
            request_id: request_id.to_owned(),
            ..Entry::default()
        }
    }

    /// Queues one entry for the writer thread; never blocks. A full queue drops the entry
    /// (counted, and reported through tracing every 10,000 drops); a write error is
    /// reported through tracing by the writer, never to the client.
    pub fn write(&self, e: Entry) {
        let Some(tx) = &self.tx else {
            return;
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            tx.try_send(Msg::Entry(Box::new(e)))
        {
            let before = self.dropped.inc();
            if before.is_multiple_of(10_000) {
                tracing::warn!(
                    dropped_total = before + 1,
                    queue = ACCESS_LOG_QUEUE,
                    "Access log output falls behind; entries dropped"
                );
            }
        }
    }

    /// Blocks until every entry queued before the call is written and flushed to the
    /// output, or 5 s passed in all (an output that takes nothing; the log's drop then
    /// waits no more). A no-op when the log is disabled.
    pub fn flush(&self) {
        let Some(tx) = &self.tx else {
            return;
        };
        if self.stalled.load(Ordering::Relaxed) {
            return;
        }
        let (ack, done) = sync_channel(1);
        let mut msg = Msg::Flush(ack);
        // A full queue is retried every millisecond; the answer is awaited for what is
        // left of the same 5 s.
        let budget = u64::try_from(FLUSH_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        for waited in 0..budget {
            match tx.try_send(msg) {
                Ok(()) => {
                    let left = Duration::from_millis(budget - waited);
                    if done.recv_timeout(left) == Err(RecvTimeoutError::Timeout) {
                        self.stalled.store(true, Ordering::Relaxed);
                    }
                    return;
                }
                Err(TrySendError::Full(m)) => msg = m,
                Err(TrySendError::Disconnected(_)) => return,
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.stalled.store(true, Ordering::Relaxed);
    }
}

impl Drop for AccessLog {
    /// Closes the queue; the writer writes what is left and ends. An output that takes
    /// nothing for 5 s is given up on (the thread is left behind, with a warning).
    fn drop(&mut self) {
        self.tx = None;
        let Some(w) = self.writer.take() else {
            return;
        };
        let wait = if self.stalled.load(Ordering::Relaxed) {
            1
        } else {
            FLUSH_TIMEOUT.as_millis()
        };
        for _ in 0..wait {
            if w.is_finished() {
                let _ = w.join();
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        tracing::warn!("Access log output takes nothing; queued entries lost");
    }
}

/// The writer thread: takes every queued message, writes the batch and flushes it (a flush
/// request is flushed and answered at once); ends when the queue is closed and empty.
fn write_loop(rx: &Receiver<Msg>, out: Output, format: AccessLogFormat) {
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, out);
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Entry(e) => {
                    let res = match format {
                        AccessLogFormat::Text => w.write_all(e.to_text().as_bytes()),
                        AccessLogFormat::Json => {
                            serde_json::to_writer(&mut w, &*e).map_err(std::io::Error::from)
                        }
                    };
                    if let Err(err) = res.and_then(|()| w.write_all(b"\n")) {
                        tracing::warn!(%err, "Access log write failed");
                    }
                }
                Msg::Flush(ack) => {
                    flush(&mut w);
                    let _ = ack.try_send(());
                }
            }
            next = rx.try_recv().ok();
        }
        flush(&mut w);
    }
}

fn flush(w: &mut std::io::BufWriter<Output>) {
    if let Err(err) = w.flush() {
        tracing::warn!(%err, "Access log write failed");
    }
}

/// RFC 3339 with nanoseconds, UTC, for "now".
#[must_use]
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests;
