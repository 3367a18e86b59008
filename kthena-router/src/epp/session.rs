//! One ext_proc stream, that is one HTTP request through Envoy: the request headers and
//! buffered body are picked for, the response headers settle the upstream phase, and the
//! end of the stream (or of the response body) settles the request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Phase;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Reply;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpBody,
    HttpHeaders, ProcessingRequest, ProcessingResponse, StreamedBodyResponse, TrailersResponse,
    body_mutation,
};
use envoy_types::pb::google::protobuf::Struct;
use http::Request;
use http_body_util::Full;
use kthena_sched::LoadGuard;
use tower::ServiceExt;

use super::Picker;
use super::pick::{Picked, Subset};
use super::wire::{self, DESTINATION, Head};
use crate::error::Error;
use crate::pipeline::ctx::{Inbound, Meta, RequestId, sched_request};
use crate::pipeline::is_inference_path;
use crate::telemetry::accounting::{Accounting, SchedDone};
use crate::upstream::endpoint::Endpoint;
use crate::upstream::overload::BreakerState;
use crate::upstream::record_breaker;

/// The state of one stream.
pub(super) struct Session {
    picker: Picker,
    head: Option<Head>,
    protocol: String,
    body: BytesMut,
    subset: Option<Arc<Vec<SocketAddr>>>,
    chosen: Option<Chosen>,
    /// `FULL_DUPLEX_STREAMED` request body: headers answered with the whole body.
    duplex_request: bool,
    /// `FULL_DUPLEX_STREAMED` response body: every chunk goes back through the picker.
    duplex_response: bool,
}

/// Largest body chunk sent back in one streamed response (Envoy's recommendation, 64 KiB).
const STREAMED_CHUNK: usize = 64 * 1024;

/// What the picker answers a request phase with.
enum Answer {
    /// Go on unchanged (a request the picker does not route).
    Pass,
    /// Go on with these mutations and dynamic metadata.
    Route(CommonResponse, Struct),
    /// Answer the client now.
    Immediate(ProcessingResponse),
}

/// The endpoints named to Envoy and the accounting of the request sent to them. Dropping it
/// settles the request.
struct Chosen {
    acct: Accounting,
    picked: Picked,
    /// Pool indices named in `x-gateway-destination-endpoint`, the pick first.
    named: Vec<usize>,
    /// The index into `named` of the endpoint holding the request's slot.
    current: usize,
    /// The slot and the owned completion data until the response headers hand them to the
    /// accounting.
    guard: Option<(LoadGuard, SchedDone)>,
}

impl Drop for Chosen {
    fn drop(&mut self) {
        self.guard = None;
        self.acct.settle();
    }
}

impl Session {
    pub(super) fn new(picker: Picker) -> Self {
        Self {
            picker,
            head: None,
            protocol: String::new(),
            body: BytesMut::new(),
            subset: None,
            chosen: None,
            duplex_request: false,
            duplex_response: false,
        }
    }

    /// Handles one message; the answers Envoy waits for (none in observability mode).
    pub(super) async fn handle(&mut self, msg: ProcessingRequest) -> Vec<ProcessingResponse> {
        if let Some(pc) = &msg.protocol_config {
            let duplex = i32::from(BodySendMode::FullDuplexStreamed);
            self.duplex_request = pc.request_body_mode == duplex;
            self.duplex_response = pc.response_body_mode == duplex;
        }
        let md = msg.metadata_context.as_ref();
        let Some(phase) = msg.request else {
            return Vec::new();
        };
        let replies = match phase {
            Phase::RequestHeaders(h) => {
                self.subset = wire::subset(md).map(Arc::new);
                self.protocol = wire::protocol(&msg.attributes).unwrap_or_default();
                self.head = Some(wire::head(h.headers.as_ref()));
                if h.end_of_stream {
                    let answer = self.pick(Bytes::new()).await;
                    vec![wrap(answer, |r| {
                        Reply::RequestHeaders(HeadersResponse { response: r })
                    })]
                } else if self.duplex_request {
                    // Full duplex: the headers are answered with the body, once it is whole.
                    Vec::new()
                } else {
                    vec![reply(Reply::RequestHeaders(HeadersResponse::default()))]
                }
            }
            Phase::RequestBody(b) => self.request_body(b).await,
            Phase::RequestTrailers(_) => {
                let mut out = Vec::new();
                if self.duplex_request && self.head.is_some() {
                    out = self.duplex_pick(false).await;
                }
                if !out.iter().any(is_immediate) {
                    out.push(reply(Reply::RequestTrailers(TrailersResponse::default())));
                }
                out
            }
            Phase::ResponseHeaders(h) => {
                self.response_headers(&h, wire::served(md)).await;
                if h.end_of_stream {
                    self.chosen = None;
                }
                vec![reply(Reply::ResponseHeaders(HeadersResponse::default()))]
            }
            Phase::ResponseBody(b) => {
                let out = if self.duplex_response {
                    if let (Some(c), false) = (&self.chosen, b.body.is_empty()) {
                        c.acct.first_byte();
                    }
                    vec![streamed(b.body, b.end_of_stream, Reply::ResponseBody)]
                } else {
                    vec![reply(Reply::ResponseBody(BodyResponse::default()))]
                };
                if b.end_of_stream {
                    self.chosen = None;
                }
                out
            }
            Phase::ResponseTrailers(_) => {
                self.chosen = None;
                vec![reply(Reply::ResponseTrailers(TrailersResponse::default()))]
            }
        };
        if msg.observability_mode {
            Vec::new()
        } else {
            replies
        }
    }

    /// A request body chunk: the pick once the body is whole.
    async fn request_body(&mut self, b: HttpBody) -> Vec<ProcessingResponse> {
        self.body.extend_from_slice(&b.body);
        match (b.end_of_stream, self.duplex_request) {
            (false, true) => Vec::new(),
            (false, false) => vec![reply(Reply::RequestBody(BodyResponse::default()))],
            (true, true) => self.duplex_pick(true).await,
            (true, false) => {
                let body = std::mem::take(&mut self.body).freeze();
                let answer = self.pick(body).await;
                vec![wrap(answer, |r| {
                    Reply::RequestBody(BodyResponse { response: r })
                })]
            }
        }
    }

    /// Full duplex: the pick answers the held headers, then the body goes back to Envoy in
    /// streamed chunks (`end` on the last one unless trailers follow).
    async fn duplex_pick(&mut self, end: bool) -> Vec<ProcessingResponse> {
        let body = std::mem::take(&mut self.body).freeze();
        let (headers, body) = match self.pick(body.clone()).await {
            Answer::Immediate(r) => return vec![r],
            Answer::Pass => (
                reply(Reply::RequestHeaders(HeadersResponse::default())),
                body,
            ),
            Answer::Route(mut common, metadata) => {
                let body = match common.body_mutation.take().and_then(|m| m.mutation) {
                    Some(body_mutation::Mutation::Body(b)) => Bytes::from(b),
                    _ => body,
                };
                let headers = ProcessingResponse {
                    response: Some(Reply::RequestHeaders(HeadersResponse {
                        response: Some(common),
                    })),
                    dynamic_metadata: Some(metadata),
                    ..ProcessingResponse::default()
                };
                (headers, body)
            }
        };
        let mut out = vec![headers];
        let mut chunks = body.chunks(STREAMED_CHUNK).peekable();
        if chunks.peek().is_none() {
            out.push(streamed(Vec::new(), end, Reply::RequestBody));
        }
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            out.push(streamed(c.to_vec(), end && last, Reply::RequestBody));
        }
        out
    }

    /// The stream ended: the request settles (as a client disconnect without an answer).
    pub(super) fn end(&mut self) {
        self.chosen = None;
    }

    /// Runs the pipeline on the request; the answer to the phase that completed it.
    async fn pick(&mut self, body: Bytes) -> Answer {
        let Some(head) = self.head.take() else {
            return Answer::Pass;
        };
        let path = head.path.split('?').next().unwrap_or_default().to_owned();
        if !is_inference_path(&path) {
            return Answer::Pass;
        }
        let shared = Arc::clone(&self.picker.shared);
        let request_id = RequestId::from_headers(&head.headers);
        let acct = Accounting::start(
            Arc::clone(&shared.metrics),
            Arc::clone(&shared.access_log),
            shared.access_log.request_entry(
                path,
                &head.method,
                || std::mem::take(&mut self.protocol),
                &request_id,
            ),
            Arc::clone(&request_id),
        );
        let picked = match self.run(head, body, &acct, request_id).await {
            Ok(p) => p,
            Err(e) => return fail(&acct, &e).await,
        };
        match self.choose(acct.clone(), picked).await {
            Ok(answer) => answer,
            Err(e) => fail(&acct, &e).await,
        }
    }

    /// The router's stages up to the scheduling decision.
    async fn run(
        &self,
        head: Head,
        body: Bytes,
        acct: &Accounting,
        request_id: Arc<str>,
    ) -> Result<Picked, Error> {
        let shared = &self.picker.shared;
        let mut req = Request::builder()
            .method(head.method.as_str())
            .uri(head.path.as_str())
            .body(Full::new(body))
            .map_err(|e| Error::BodyRead {
                reason: e.to_string(),
            })?;
        *req.headers_mut() = head.headers;
        if !req.headers().contains_key(http::header::HOST)
            && let Ok(v) = http::HeaderValue::from_str(&head.authority)
        {
            req.headers_mut().insert(http::header::HOST, v);
        }
        let mut user = None;
        if let Some(auth) = &shared.auth {
            let sub = auth.authenticate(req.headers()).await?.sub;
            acct.user(&sub);
            user = Some(crate::auth::UserId(sub.into()));
        }
        if let Some(s) = &self.subset {
            req.extensions_mut().insert(Subset(Arc::clone(s)));
        }
        let meta = Meta {
            acct: acct.clone(),
            id: RequestId(request_id),
            user,
            pick_only: true,
        };
        let req = req.map(|body| Inbound { body, meta });
        let resp = self.picker.stack.clone().oneshot(req).await?;
        resp.extensions()
            .get::<Picked>()
            .cloned()
            .ok_or(Error::PipelineMissing {
                missing: "scheduling decision",
            })
    }

    /// Names the pick and its fallbacks, takes the pick's slot, and builds the answer.
    async fn choose(&mut self, acct: Accounting, picked: Picked) -> Result<Answer, Error> {
        let max = match picked.routed.server.retry {
            Some((n, _)) => self.picker.max_endpoints.min(n.max(1)),
            None => self.picker.max_endpoints,
        };
        let named = name_endpoints(&self.picker, &picked, max);
        let Some(&first) = named.first() else {
            return Err(Error::CircuitOpen {
                server: picked.routed.server.key.clone(),
                retry_after: Duration::from_secs(1),
            });
        };
        let destinations: Vec<String> = named
            .iter()
            .map(|&i| picked.routed.pool[i].socket.to_string())
            .collect();
        let destinations = destinations.join(",");
        acct.upstream_begin();
        let guard = take_slot(&self.picker, &acct, &picked, first, 1).await;
        let mut set_headers = vec![wire::set_header(DESTINATION, &destinations)];
        let rewrite = picked
            .routed
            .lora
            .is_none()
            .then_some(picked.routed.server.model.as_deref())
            .flatten()
            .filter(|m| *m != picked.parsed.req.model);
        let body_mutation = rewrite.map(|m| {
            // Only `model` changes (no usage injection: the picker never sees the answer).
            let body = picked.parsed.req.upstream_responses_body(Some(m)).bytes;
            set_headers.push(wire::set_header("content-length", &body.len().to_string()));
            BodyMutation {
                mutation: Some(body_mutation::Mutation::Body(body.to_vec())),
            }
        });
        tracing::debug!(destinations, server = %picked.routed.server.key, "Picked");
        self.chosen = Some(Chosen {
            acct,
            picked,
            named,
            current: 0,
            guard: Some(guard),
        });
        let common = CommonResponse {
            header_mutation: Some(HeaderMutation {
                set_headers,
                remove_headers: Vec::new(),
            }),
            body_mutation,
            ..CommonResponse::default()
        };
        Ok(Answer::Route(
            common,
            wire::destination_metadata(&destinations),
        ))
    }

    /// The upstream answered (or Envoy did): move the slot to the endpoint that served,
    /// feed the breakers, and record the status.
    async fn response_headers(&mut self, h: &HttpHeaders, served: Option<SocketAddr>) {
        let Some(c) = self.chosen.as_mut() else {
            return;
        };
        let shared = &self.picker.shared;
        let status = wire::head(h.headers.as_ref()).status.unwrap_or(0);
        let pool = Arc::clone(&c.picked.routed.pool);
        if let Some(pos) = served.and_then(|a| c.named.iter().position(|&i| pool[i].socket == a))
            && pos != c.current
        {
            // Envoy retried: the endpoints named before the one that served failed.
            for &i in &c.named[c.current..pos] {
                record_breaker(shared, &pool[i], false);
            }
            c.acct.attempt_failed();
            if let Some((g, d)) = c.guard.take() {
                drop(g);
                d.complete(false);
            }
            c.guard =
                Some(take_slot(&self.picker, &c.acct, &c.picked, c.named[pos], pos + 1).await);
            c.current = pos;
        }
        let ep = &pool[c.named[c.current]];
        c.acct.upstream_status(status);
        record_breaker(shared, ep, !(500..600).contains(&status));
        if let Some((mut g, sched)) = c.guard.take() {
            if !self.duplex_response {
                // The answer has started: the prefill is over (the picker sees no body).
                g.first_byte();
            }
            c.acct.answered(g, sched);
        }
        let failed = status == 429 || status >= 500;
        let error = failed.then(|| {
            (
                "upstream_response",
                format!("{} answered {status}", ep.name),
            )
        });
        c.acct
            .finish(status, error, if failed { "upstream" } else { "" }, 0);
    }
}

/// The pick (the first ranked endpoint whose breaker lets it through) and up to `max - 1`
/// fallbacks in rank order whose breakers are not open.
fn name_endpoints(picker: &Picker, picked: &Picked, max: usize) -> Vec<usize> {
    let shared = &picker.shared;
    let now = tokio::time::Instant::now();
    let cool_down = shared.overload.breaker_cool_down;
    let mut named = Vec::with_capacity(max);
    for &idx in picked.sched.ranked.iter() {
        let ep: &Arc<Endpoint> = &picked.routed.pool[idx];
        if named.is_empty() {
            match ep.breaker().try_pass(now, cool_down) {
                None => continue,
                Some(BreakerState::HalfOpen) => {
                    let m = &shared.metrics.overload;
                    m.breaker(&ep.namespace, &ep.name, BreakerState::HalfOpen);
                }
                Some(_) => {}
            }
        } else if !ep.breaker().available(now) {
            continue;
        }
        named.push(idx);
        if named.len() == max {
            break;
        }
    }
    named
}

/// Counts the request on pool endpoint `idx` (attempt `attempt`, 1-based) and tells the
/// cache-affinity plugins, as the router's proxy does for each attempt.
async fn take_slot(
    picker: &Picker,
    acct: &Accounting,
    picked: &Picked,
    idx: usize,
    attempt: usize,
) -> (LoadGuard, SchedDone) {
    let ep = &picked.routed.pool[idx];
    acct.attempt(&ep.name, attempt);
    let sreq = sched_request(
        &picked.parsed.req,
        &picked.tokens,
        picked.routed.lora.as_deref(),
        &picked.prefetched,
    );
    let cand = &picked.sched.cands[idx];
    let scheduler = &picked.parsed.snap.scheduler;
    let done = scheduler.on_scheduled(&sreq, cand);
    let mut guard = ep.begin_request(done.prefill_tokens);
    if let Some(s) = picker.shared.in_flight_share.get() {
        s.track(ep, &mut guard).await;
        s.routed(&picked.parsed.snap.kv, &ep.id, &sreq);
    }
    let done = SchedDone::new(Arc::clone(scheduler), done);
    (guard, done)
}

/// Settles a request the picker answers itself.
async fn fail(acct: &Accounting, e: &Error) -> Answer {
    acct.failed(e);
    acct.settle();
    Answer::Immediate(wire::immediate(e).await)
}

fn wrap(answer: Answer, phase: impl FnOnce(Option<CommonResponse>) -> Reply) -> ProcessingResponse {
    match answer {
        Answer::Pass => reply(phase(None)),
        Answer::Route(common, metadata) => ProcessingResponse {
            response: Some(phase(Some(common))),
            dynamic_metadata: Some(metadata),
            ..ProcessingResponse::default()
        },
        Answer::Immediate(r) => r,
    }
}

fn reply(r: Reply) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(r),
        ..ProcessingResponse::default()
    }
}

fn is_immediate(r: &ProcessingResponse) -> bool {
    matches!(r.response, Some(Reply::ImmediateResponse(_)))
}

/// A body chunk handed back to Envoy in full-duplex mode.
fn streamed(
    body: Vec<u8>,
    end_of_stream: bool,
    phase: fn(BodyResponse) -> Reply,
) -> ProcessingResponse {
    let common = CommonResponse {
        body_mutation: Some(BodyMutation {
            mutation: Some(body_mutation::Mutation::StreamedResponse(
                StreamedBodyResponse {
                    body,
                    end_of_stream,
                    ..StreamedBodyResponse::default()
                },
            )),
        }),
        ..CommonResponse::default()
    };
    reply(phase(BodyResponse {
        response: Some(common),
    }))
}
