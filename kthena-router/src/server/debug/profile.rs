//! Profiles on the debug port, as Go Kthena serves `net/http/pprof` there
//! (`cmd/kthena-router/app/router.go`, `startDebugServer`):
//!
//! * `GET /debug/pprof/profile?seconds=N` samples the whole process's CPU time for `N`
//!   seconds (default 30 as Go's, 1 to [`MAX_SECONDS`]) at [`FREQUENCY_HZ`] and answers a
//!   gzipped `perftools.profiles.Profile` protobuf (`application/octet-stream`), what
//!   `go tool pprof` and `pprof` read. The sampler is the `pprof` crate's (`SIGPROF` timer,
//!   stacks unwound and symbolized in the process; its own frames are dropped from each
//!   stack). Samples taken while a thread runs inside the C library, the unwinder or the vDSO
//!   are skipped, as the crate advises (unwinding from there can deadlock), so system-call
//!   time is undercounted. One profile at a time: a second request meanwhile gets 409; a bad
//!   `seconds` gets 400.
//! * `GET /debug/pprof/heap` answers 501: the router allocates through mimalloc, which keeps
//!   no allocation-site samples to report.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::pprof::protos::Message as _;
use http::{Response, StatusCode};
use serde_json::json;

use crate::body::{RespBody, full};

/// Seconds sampled when the query gives none (Go's `net/http/pprof` default).
pub(crate) const DEFAULT_SECONDS: u64 = 30;
/// Longest profile, in seconds.
pub(crate) const MAX_SECONDS: u64 = 300;
/// Samples per second of CPU time (Go's rate).
pub(crate) const FREQUENCY_HZ: i32 = 100;

/// Set while a profile is being taken.
static BUSY: AtomicBool = AtomicBool::new(false);

/// Why a profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProfileError {
    /// `seconds` is not an integer from 1 to [`MAX_SECONDS`].
    #[error("seconds must be an integer from 1 to {MAX_SECONDS}, got {0:?}")]
    BadSeconds(String),
    /// Another profile is being taken.
    #[error("a CPU profile is already being taken; retry when it is done")]
    Busy,
    /// The sampler failed to start or to build its report.
    #[error("CPU profiler: {0}")]
    Profiler(#[from] ::pprof::Error),
    /// The report could not be compressed.
    #[error("compressing the profile: {0}")]
    Gzip(#[from] std::io::Error),
}

impl ProfileError {
    fn status(&self) -> StatusCode {
        match self {
            Self::BadSeconds(_) => StatusCode::BAD_REQUEST,
            Self::Busy => StatusCode::CONFLICT,
            Self::Profiler(_) | Self::Gzip(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Clears [`BUSY`] when the profile ends, also when the client goes away mid-profile
/// (the request future, and with it the sampler, is dropped).
struct Slot;

impl Slot {
    fn take() -> Result<Self, ProfileError> {
        BUSY.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| Self)
            .map_err(|_| ProfileError::Busy)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::Release);
    }
}

/// The `seconds` of a query string (`None`: no query).
///
/// # Errors
/// [`ProfileError::BadSeconds`] for a value that is not an integer from 1 to
/// [`MAX_SECONDS`].
pub(crate) fn seconds(query: Option<&str>) -> Result<u64, ProfileError> {
    let value = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .find_map(|(k, v)| (k == "seconds").then_some(v));
    let Some(v) = value else {
        return Ok(DEFAULT_SECONDS);
    };
    v.parse::<u64>()
        .ok()
        .filter(|n| (1..=MAX_SECONDS).contains(n))
        .ok_or_else(|| ProfileError::BadSeconds(v.to_owned()))
}

/// Samples for `seconds` and returns the gzipped protobuf profile.
async fn take(seconds: u64) -> Result<Vec<u8>, ProfileError> {
    let _slot = Slot::take()?;
    let guard = ::pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY_HZ)
        // Frames inside the C library and the unwinder are not the router's work.
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    // Symbolization takes a while (CPU): off the serving threads.
    let built = tokio::task::spawn_blocking(move || {
        let report = guard
            .report()
            .frames_post_processor(drop_sampler_frames)
            .build()?;
        drop(guard);
        let profile = report.pprof()?;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&profile.encode_to_vec())?;
        Ok::<_, ProfileError>(gz.finish()?)
    })
    .await;
    match built {
        Ok(r) => r,
        Err(e) => Err(ProfileError::Gzip(std::io::Error::other(e))),
    }
}

/// Drops the sampler's own frames from the leaf end of a stack: the unwinder
/// (`backtrace::...`), the `pprof` crate's tracing and signal handler (`pprof::...`,
/// `perf_signal_handler`) and the signal return trampoline (`__restore_rt`), so that a
/// sample's leaf is the function that was running (what `pprof -top` calls flat time).
fn drop_sampler_frames(frames: &mut ::pprof::Frames) {
    let own = |f: &Vec<::pprof::Symbol>| {
        !f.is_empty()
            && f.iter().all(|s| {
                let n = s.name();
                n.starts_with("backtrace::")
                    || n.contains("pprof::")
                    || n.contains("perf_signal_handler")
                    || n == "__restore_rt"
            })
    };
    let n = frames.frames.iter().take_while(|f| own(f)).count();
    frames.frames.drain(..n);
}

fn error_answer(e: &ProfileError) -> Response<RespBody> {
    let mut r = Response::new(full(json!({"error": e.to_string()}).to_string()));
    *r.status_mut() = e.status();
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /debug/pprof/profile`: see the module doc.
pub(crate) async fn cpu(query: Option<String>) -> Response<RespBody> {
    let profile = match seconds(query.as_deref()) {
        Ok(n) => take(n).await,
        Err(e) => Err(e),
    };
    match profile {
        Ok(bytes) => {
            let mut r = Response::new(full(bytes));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/octet-stream"),
            );
            r.headers_mut().insert(
                http::header::CONTENT_DISPOSITION,
                http::HeaderValue::from_static(r#"attachment; filename="profile""#),
            );
            r
        }
        Err(e) => error_answer(&e),
    }
}

/// `GET /debug/pprof/heap`: 501, see the module doc.
pub(crate) fn heap() -> Response<RespBody> {
    let mut r = Response::new(full(
        json!({"error": "heap profiles are not available: the router allocates through \
                mimalloc, which records no allocation sites; take a CPU profile \
                (/debug/pprof/profile) or watch the process's resident memory"})
        .to_string(),
    ));
    *r.status_mut() = StatusCode::NOT_IMPLEMENTED;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests;
