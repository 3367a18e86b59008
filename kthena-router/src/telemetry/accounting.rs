//! Per-request accounting in one place: the in-flight slots (router admission and the
//! chosen endpoint, with its prefill counters), the gauges of active requests, one
//! `kthena_router_requests_total`/duration/token record, one access-log line and the
//! scheduler's completion hook, all settled exactly once when the response body ends or is
//! dropped ([`AccountedBody`]).
//!
//! The pipeline's layers report what they learnt through the methods of [`Accounting`]
//! (a cheap handle carried in the request's extensions); only this module writes the
//! access-log entry and the metric labels.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use kthena_openai::{ParsedRequest, estimate_tokens};
use kthena_sched::{Completion, LoadGuard, Scheduler};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::body::{BoxError, RespBody};
use crate::error::Error;
use crate::telemetry::accesslog::{AccessLog, Entry, EntryError};
use crate::telemetry::metrics::{Destination, LabelValue, Metrics, RequestRecord, unknown_label};

/// `value` as a label: `current` shared when it already holds it, else a new one.
fn reuse_label(current: &LabelValue, value: &str) -> LabelValue {
    if &**current == value {
        Arc::clone(current)
    } else {
        Arc::from(value)
    }
}

/// Per-request accounting: metrics, access log and scheduler completion, settled once.
///
/// Dropping an unsettled context (the client went away before an answer) settles it with
/// status 499 and error `client_disconnect`.
#[derive(Debug)]
pub(crate) struct RequestCtx {
    /// The request's id (`x-request-id`, or one made up), for log lines.
    request_id: Arc<str>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) access_log: Arc<AccessLog>,
    pub(crate) start: Instant,
    /// Access-log entry being filled.
    pub(crate) entry: Entry,
    /// Whether request metrics are recorded (false for body-parse failures, as Go Kthena).
    pub(crate) record_metrics: bool,
    /// Model label (`unknown` for models no route knows).
    pub(crate) model_label: LabelValue,
    /// Destination labels.
    pub(crate) dest: Destination,
    pub(crate) upstream_start: Option<Instant>,
    pub(crate) upstream_end: Option<Instant>,
    pub(crate) downstream_model: Option<LabelValue>,
    pub(crate) upstream_active: bool,
    pub(crate) sched: Option<SchedDone>,
    pub(crate) settled: bool,
    /// The chosen endpoint's in-flight slot, given back when the request settles.
    in_flight: Option<LoadGuard>,
    /// The admission slot of `overload.maxInFlight`, given back when the request settles.
    permit: Option<OwnedSemaphorePermit>,
    /// How the request ended, once known (the answer's status and error).
    outcome: Option<Outcome>,
    /// Told the engine's output tokens as they are reported (the output rate limit).
    output_hook: Option<OutputHook>,
    /// Output tokens already told to `output_hook`.
    output_told: u64,
    /// The fairness or session-boost turn, given back (and charged) when the request settles.
    queue_ticket: Option<crate::queue::Ticket>,
    /// The request counted as active for its ModelServer (the idle-seconds family) from
    /// the route match until it settles; held requests count.
    server_active: Option<crate::coldstart::metrics::ActiveGuard>,
}

/// A callback taking output tokens not told before (the increase of `completion_tokens`).
pub(crate) struct OutputHook(Box<dyn FnMut(u64) + Send>);

impl std::fmt::Debug for OutputHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputHook")
    }
}

/// How a request ended: status, error `(type, message)`, error origin, output tokens.
#[derive(Debug)]
struct Outcome {
    status: u16,
    error: Option<(&'static str, String)>,
    origin: &'static str,
    output_tokens: u64,
}

/// What the scheduler is told when the request completes: the owned completion data
/// [`Scheduler::on_scheduled`] returned, for the scheduler that scheduled the request. Told
/// once, by [`complete`](Self::complete), or as a failure when dropped without it (a request
/// abandoned at any await point still releases what the plugins hold for it, such as its
/// pinned KV blocks).
#[derive(Debug)]
pub(crate) struct SchedDone {
    scheduler: Arc<Scheduler>,
    done: Option<Completion>,
}

impl SchedDone {
    /// The completion data `done` of a request `scheduler` scheduled.
    pub(crate) fn new(scheduler: Arc<Scheduler>, done: Completion) -> Self {
        Self {
            scheduler,
            done: Some(done),
        }
    }

    /// Tells the scheduler the request ended; `success`: the upstream answered successfully.
    pub(crate) fn complete(mut self, success: bool) {
        if let Some(d) = self.done.take() {
            self.scheduler.on_completed(&d, success);
        }
    }
}

impl Drop for SchedDone {
    fn drop(&mut self) {
        if let Some(d) = self.done.take() {
            self.scheduler.on_completed(&d, false);
        }
    }
}

impl RequestCtx {
    fn new(
        metrics: Arc<Metrics>,
        access_log: Arc<AccessLog>,
        entry: Entry,
        request_id: Arc<str>,
    ) -> Self {
        metrics.active_requests(1);
        Self {
            request_id,
            metrics,
            access_log,
            start: Instant::now(),
            entry,
            record_metrics: false,
            model_label: unknown_label(),
            dest: Destination::default(),
            upstream_start: None,
            upstream_end: None,
            downstream_model: None,
            upstream_active: false,
            sched: None,
            settled: false,
            in_flight: None,
            permit: None,
            outcome: None,
            output_hook: None,
            output_told: 0,
            queue_ticket: None,
            server_active: None,
        }
    }

    pub(crate) fn set_downstream(&mut self, model: LabelValue) {
        self.metrics.active_downstream(&model, 1);
        self.downstream_model = Some(model);
    }

    /// Tells the output hook the tokens of `completion_tokens` not told yet.
    fn tell_output(&mut self, completion_tokens: u64) {
        if completion_tokens <= self.output_told {
            return;
        }
        let more = completion_tokens - self.output_told;
        self.output_told = completion_tokens;
        if let Some(OutputHook(f)) = self.output_hook.as_mut() {
            f(more);
        }
    }

    pub(crate) fn set_upstream_active(&mut self, on: bool) {
        if on != self.upstream_active {
            self.metrics
                .active_upstream(&self.dest, if on { 1 } else { -1 });
            self.upstream_active = on;
        }
    }

    /// Settles the request: gauges back, one `requests_total`, one access-log line, the
    /// scheduler's completion hook.
    fn settle(
        &mut self,
        status: u16,
        error: Option<(&'static str, String)>,
        origin: &str,
        output_tokens: u64,
    ) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.in_flight = None;
        self.permit = None;
        self.server_active = None;
        // The last output count, then the hook goes (an output reservation settles).
        self.tell_output(output_tokens);
        self.output_hook = None;
        let now = Instant::now();
        self.set_upstream_active(false);
        if let Some(m) = self.downstream_model.take() {
            self.metrics.active_downstream(&m, -1);
        }
        self.metrics.active_requests(-1);
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let up_start = self.upstream_start.unwrap_or(now);
        let up_end = self.upstream_end.unwrap_or(now).max(up_start);
        let e = &mut self.entry;
        e.status_code = status;
        e.output_tokens = output_tokens;
        e.duration_total = ms(now - self.start);
        e.duration_request_processing = ms(up_start - self.start);
        e.duration_upstream_processing = ms(up_end - up_start);
        e.duration_response_processing = ms(now.saturating_duration_since(up_end));
        let error_type = error.as_ref().map(|(t, _)| *t);
        if let Some((kind, message)) = error {
            e.error = Some(EntryError {
                kind: kind.to_owned(),
                message,
            });
            e.error_origin = origin.to_owned();
        }
        if self.record_metrics {
            self.metrics.record_request(&RequestRecord {
                model: &self.model_label,
                path: &self.entry.path,
                status,
                error_type,
                dest: &self.dest,
                duration_secs: (now - self.start).as_secs_f64(),
                input_tokens: self.entry.input_tokens,
                output_tokens,
            });
        }
        let input_tokens = self.entry.input_tokens;
        self.access_log.write(std::mem::take(&mut self.entry));
        if let Some(t) = self.queue_ticket.take() {
            let ok = status < 400 && error_type.is_none();
            t.settled(ok, input_tokens, output_tokens);
        }
        if let Some(s) = self.sched.take() {
            s.complete(status < 400 && error_type.is_none());
        }
    }
}

impl Drop for RequestCtx {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(
                499,
                Some((
                    "client_disconnect",
                    "client closed the connection before the answer".into(),
                )),
                "downstream",
                0,
            );
        }
    }
}

/// A handle on one request's accounting, shared by the pipeline's layers (it lives in the
/// request's extensions) and settled by [`AccountedBody`].
#[derive(Debug, Clone)]
pub(crate) struct Accounting(Arc<Mutex<RequestCtx>>);

impl Accounting {
    /// Starts accounting the `/v1/*` request `request_id` (one more active request).
    pub(crate) fn start(
        metrics: Arc<Metrics>,
        access_log: Arc<AccessLog>,
        entry: Entry,
        request_id: Arc<str>,
    ) -> Self {
        Self(Arc::new(Mutex::new(RequestCtx::new(
            metrics, access_log, entry, request_id,
        ))))
    }

    /// The request's id, for log lines about it.
    pub(crate) fn request_id(&self) -> Arc<str> {
        Arc::clone(&self.lock().request_id)
    }

    fn lock(&self) -> MutexGuard<'_, RequestCtx> {
        match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The body parsed: request metrics are recorded from now on, under the model's label
    /// when a route `knows` it (`unknown` otherwise).
    pub(crate) fn parsed(&self, parsed: &ParsedRequest, known: bool) {
        let mut c = self.lock();
        c.record_metrics = true;
        c.entry.model_name = parsed.model.clone();
        c.entry.input_tokens = estimate_tokens(&parsed.prompt_text);
        if known {
            c.model_label = Arc::from(parsed.model.as_str());
        }
        let label = Arc::clone(&c.model_label);
        c.set_downstream(label);
    }

    /// The request authenticated as `user` (the token's `sub`).
    pub(crate) fn user(&self, user: &str) {
        self.lock().entry.user_id = user.to_owned();
    }

    /// The backend type resolved so far (`model_server`, `external_provider`,
    /// `inference_pool`, or `unresolved`).
    pub(crate) fn backend_type(&self) -> &'static str {
        self.lock().dest.backend_type
    }

    /// A ModelRoute matched (`namespace/name`).
    pub(crate) fn route_matched(&self, route: &str) {
        let mut c = self.lock();
        c.dest.model_route = Arc::from(route);
        c.entry.model_route = route.to_owned();
    }

    /// The route's ModelServer was found; requests go upstream as `upstream_model`.
    pub(crate) fn server_resolved(&self, route: &str, server: &str, upstream_model: &str) {
        let mut c = self.lock();
        if !c.settled
            && c.server_active
                .as_ref()
                .is_none_or(|g| g.server() != server)
        {
            c.server_active = Some(c.metrics.cold_start.enter(server));
        }
        c.dest = Destination {
            model_route: reuse_label(&c.dest.model_route, route),
            backend_type: "model_server",
            backend_name: Arc::from(server),
            upstream_model: Arc::from(upstream_model),
        };
        let e = &mut c.entry;
        e.model_server = server.to_owned();
        e.backend_type = "model_server".into();
        e.backend_name = server.to_owned();
        e.upstream_model = upstream_model.to_owned();
    }

    /// The route's target is the ExternalModelProvider `provider` (`namespace/name`).
    pub(crate) fn provider_resolved(&self, route: &str, provider: &str, upstream_model: &str) {
        let mut c = self.lock();
        c.dest = Destination {
            model_route: reuse_label(&c.dest.model_route, route),
            backend_type: "external_provider",
            backend_name: Arc::from(provider),
            upstream_model: Arc::from(upstream_model),
        };
        let e = &mut c.entry;
        e.backend_type = "external_provider".into();
        e.backend_name = provider.to_owned();
        e.upstream_model = upstream_model.to_owned();
    }

    /// The HTTPRoute `route` of Gateway `gateway` sent the request to the InferencePool
    /// `pool` (all `namespace/name`).
    pub(crate) fn pool_resolved(
        &self,
        gateway: &str,
        route: &str,
        pool: &str,
        upstream_model: &str,
    ) {
        let mut c = self.lock();
        c.entry.gateway = gateway.to_owned();
        c.entry.http_route = route.to_owned();
        c.entry.inference_pool = pool.to_owned();
        c.dest.backend_type = "inference_pool";
        c.dest.backend_name = Arc::from(pool);
        c.dest.upstream_model = Arc::from(upstream_model);
        let e = &mut c.entry;
        e.backend_type = "inference_pool".into();
        e.backend_name = pool.to_owned();
        e.upstream_model = upstream_model.to_owned();
    }

    /// Holds the router admission slot until the request settles.
    pub(crate) fn admitted(&self, permit: OwnedSemaphorePermit) {
        self.lock().permit = Some(permit);
    }

    /// Holds the request's queue turn until the request settles.
    pub(crate) fn queued(&self, ticket: crate::queue::Ticket) {
        self.lock().queue_ticket = Some(ticket);
    }

    /// The prompt was tokenized: `n` input tokens (replaces the estimate).
    pub(crate) fn tokenized(&self, n: usize) {
        self.lock().entry.input_tokens = n as u64;
    }

    /// The first upstream attempt is about to start.
    pub(crate) fn upstream_begin(&self) {
        self.lock().upstream_start = Some(Instant::now());
    }

    /// Attempt `attempt` (1-based) goes to `pod`.
    pub(crate) fn attempt(&self, pod: &str, attempt: usize) {
        let mut c = self.lock();
        c.entry.selected_pod = pod.to_owned();
        c.entry.upstream_attempts = attempt;
        c.set_upstream_active(true);
    }

    /// A LoRA load/unload call was answered by `pod` with `status` (one attempt).
    pub(crate) fn admin_answered(&self, pod: &str, status: u16) {
        let mut c = self.lock();
        c.entry.selected_pod = pod.to_owned();
        c.entry.upstream_status_code = status;
        c.entry.upstream_attempts = 1;
    }

    /// The attempt answered with `status` (before any retry decision).
    pub(crate) fn upstream_status(&self, status: u16) {
        self.lock().entry.upstream_status_code = status;
    }

    /// The attempt failed; another may follow.
    pub(crate) fn attempt_failed(&self) {
        self.lock().set_upstream_active(false);
    }

    /// No more attempts: the upstream phase ends now.
    pub(crate) fn upstream_end(&self) {
        self.lock().upstream_end = Some(Instant::now());
    }

    /// The answer being streamed holds the endpoint's slot; the scheduler is told when the
    /// request completes (with its outcome).
    pub(crate) fn answered(&self, guard: LoadGuard, sched: SchedDone) {
        let mut c = self.lock();
        c.upstream_end = Some(Instant::now());
        c.in_flight = Some(guard);
        c.sched = Some(sched);
    }

    /// The first response body byte arrived: the endpoint's prefill is over.
    pub(crate) fn first_byte(&self) {
        if let Some(g) = self.lock().in_flight.as_mut() {
            g.first_byte();
        }
    }

    /// Records how the request ended (the first call wins); [`Accounting::settle`] or the
    /// end of the [`AccountedBody`] writes it out.
    pub(crate) fn finish(
        &self,
        status: u16,
        error: Option<(&'static str, String)>,
        origin: &'static str,
        output_tokens: u64,
    ) {
        let mut c = self.lock();
        if c.outcome.is_some() {
            return;
        }
        c.outcome = Some(Outcome {
            status,
            error,
            origin,
            output_tokens,
        });
        c.tell_output(output_tokens);
    }

    /// A stream chunk reported `usage.completion_tokens` (before the stream ends).
    pub(crate) fn usage(&self, completion_tokens: u64) {
        self.lock().tell_output(completion_tokens);
    }

    /// Calls `hook` with the output tokens as the engine reports them: a stream's usage chunk
    /// as soon as it arrives (each increase once, for engines reporting usage in every
    /// chunk), the rest of `completion_tokens` when the answer ends; `hook` is dropped when
    /// the request settles.
    pub(crate) fn on_output_tokens(&self, hook: Box<dyn FnMut(u64) + Send>) {
        self.lock().output_hook = Some(OutputHook(hook));
    }

    /// The request failed with `e` (answered by [`crate::error::error_response`]).
    pub(crate) fn failed(&self, e: &Error) {
        self.finish(
            e.status().as_u16(),
            Some((e.finish_reason(), e.to_string())),
            e.origin(),
            0,
        );
    }

    /// Settles with the recorded outcome, or as a client disconnect (499) without one.
    pub(crate) fn settle(&self) {
        let mut c = self.lock();
        match c.outcome.take() {
            Some(o) => c.settle(o.status, o.error, o.origin, o.output_tokens),
            None => c.settle(
                499,
                Some((
                    "client_disconnect",
                    "client closed the connection before the answer".into(),
                )),
                "downstream",
                0,
            ),
        }
    }
}

/// Wraps a response body; settles the request's [`Accounting`] when the body has sent its
/// last frame (before that frame leaves, so a client holding the whole answer also sees it
/// counted), failed, or was dropped (the client went away).
#[derive(Debug)]
pub(crate) struct AccountedBody {
    inner: Option<RespBody>,
    acct: Accounting,
}

impl AccountedBody {
    /// Wraps `inner`.
    pub(crate) fn new(inner: RespBody, acct: Accounting) -> Self {
        Self {
            inner: Some(inner),
            acct,
        }
    }

    fn settle(&mut self) {
        // The inner body records its outcome when it ends or is dropped: drop it first.
        self.inner = None;
        self.acct.settle();
    }
}

impl Body for AccountedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *inner).poll_frame(cx);
        match &polled {
            Poll::Pending => {}
            Poll::Ready(Some(Ok(_))) if !inner.is_end_stream() => {}
            Poll::Ready(_) => this.settle(),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for AccountedBody {
    fn drop(&mut self) {
        if self.inner.is_some() {
            self.settle();
        }
    }
}

#[cfg(test)]
mod tests;
