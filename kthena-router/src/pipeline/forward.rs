//! Proxy with retries, the innermost service: sends the identical body to the ranked
//! endpoints in turn, retrying on connect errors, 429 and 5xx before the first response
//! byte (and on an adapter 404 from a stale adapter list), feeds each endpoint's circuit
//! breaker, and streams the chosen answer through a
//! [`ProxyBody`](crate::upstream::body::ProxyBody). A multipart upload whose rest streams
//! ([`Tail`]) is retried only while no attempt took that rest from the client; a failure
//! of the client's body while it streams is answered as that failure (413, 408, 499).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use kthena_sched::LoadGuard;
use tokio::time::Instant;

use super::BoxFut;
use super::ctx::{
    Ctx, Decided, Decision, Parsed, Prefetched, Routed, Scheduled, Tokens, sched_request,
};
use crate::body::tail::Tail;
use crate::body::{HeldBody, RespBody, form, full};
use crate::config::DEFAULT_ATTEMPTS;
use crate::error::{Error, error_chain};
use crate::shared::Shared;
use crate::telemetry::accounting::{Accounting, SchedDone};
use crate::upstream::endpoint::Endpoint;
use crate::upstream::{
    self, Dest, ReqBody, SendError, UpBody, record_breaker, stream_response, strip_hop_by_hop,
    upstream_headers,
};
use kthena_openai::UpstreamBody;

/// Largest upstream error body kept to pass on after the last attempt, in bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends the request upstream (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Forward {
    shared: Arc<Shared>,
}

impl Forward {
    /// The service over the router's shared state.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl tower::Service<Request<Ctx<Decided>>> for Forward {
    type Response = Response<RespBody>;
    type Error = Error;
    type Future = BoxFut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Ctx<Decided>>) -> BoxFut {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let (parts, ctx) = req.into_parts();
            let Ctx {
                meta,
                parsed,
                held,
                tail,
                at,
            } = ctx;
            let Decided {
                routed,
                tokens,
                prefetched,
                decision,
            } = at;
            let sched = match decision {
                Decision::Ranked(s) => s,
                Decision::Pd(_) if tail.is_some() || form::boundary(&parts.headers).is_some() => {
                    // Prefill/decode sends JSON bodies built from the parsed request.
                    return Err(Error::PdUnavailable {
                        server: routed.server.key.clone(),
                        reason: "a multipart/form-data body is not served by prefill/decode"
                            .to_owned(),
                    });
                }
                Decision::Pd(pd) => {
                    let at = crate::pd::flow::PdRequest {
                        parsed,
                        routed,
                        tokens,
                        prefetched,
                        sched: pd,
                    };
                    // Boxed on its own: this future is boxed per request, and moving it
                    // should not copy the prefill-decode flow's state (some KiB) each time.
                    let flow = crate::pd::flow::forward(shared, &parts, &meta, at);
                    let r = Box::pin(flow).await;
                    drop(held);
                    return r;
                }
            };
            let mut headers = upstream_headers(&parts.headers, &meta.id.0);
            crate::gateway::UpstreamHost::apply(&parts.extensions, &mut headers);
            let plan = Plan {
                headers,
                body: routed.upstream_body(&parsed.req, parts.uri.path()),
                path_and_query: parts
                    .uri
                    .path_and_query()
                    .map_or(parts.uri.path(), |p| p.as_str())
                    .to_owned(),
                acct: meta.acct,
                shared,
                parsed,
                routed,
                tokens,
                prefetched,
                sched,
                tail,
                _held: held,
            };
            plan.run().await
        })
    }
}

/// One request's upstream plan: what every attempt sends and where.
struct Plan {
    shared: Arc<Shared>,
    acct: Accounting,
    parsed: Parsed,
    routed: Routed,
    tokens: Tokens,
    prefetched: Prefetched,
    sched: Scheduled,
    body: UpstreamBody,
    headers: HeaderMap,
    path_and_query: String,
    /// The rest of a multipart upload, sent after `body` by the first attempt whose
    /// connection asks for it; no attempt follows one that took it.
    tail: Option<Tail>,
    /// The body's budget reservation, held until the answer head.
    _held: HeldBody,
}

/// What one attempt came to.
enum Step {
    /// The answer to stream to the client.
    Answer(Response<RespBody>),
    /// The endpoint was not tried (adapter gone, breaker open).
    Skip,
    /// The attempt failed: why, the error answer kept, and whether to stop retrying.
    Failed {
        why: String,
        resp: Option<(http::response::Parts, Bytes)>,
        stop: bool,
    },
}

impl Plan {
    async fn run(self) -> Result<Response<RespBody>, Error> {
        let (attempts, pause) = match self.routed.server.retry {
            Some((n, pause)) => (n, pause),
            None => (
                DEFAULT_ATTEMPTS.min(self.sched.ranked.len()),
                Duration::ZERO,
            ),
        };
        self.acct.upstream_begin();
        let mut last_fail: Option<String> = None;
        let mut last_resp = None;
        for attempt in 0..attempts {
            if attempt > 0 && self.tail.as_ref().is_some_and(Tail::taken) {
                // The client's bytes went to the last endpoint: none is left to send again.
                break;
            }
            if attempt > 0 && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            match self.attempt(attempt).await? {
                Step::Answer(r) => return Ok(r),
                Step::Skip => {}
                Step::Failed { why, resp, stop } => {
                    last_fail = Some(why);
                    last_resp = resp;
                    if stop {
                        break;
                    }
                }
            }
        }
        self.acct.upstream_end();
        if let Some((p, b)) = last_resp {
            // The last answer was 429/5xx (or an adapter 404): hand it to the client unchanged.
            let status = p.status.as_u16();
            let why = last_fail.unwrap_or_default();
            self.acct
                .finish(status, Some(("upstream_response", why)), "upstream", 0);
            let mut r = Response::from_parts(p, full(b));
            strip_hop_by_hop(r.headers_mut());
            return Ok(r);
        }
        Err(Error::AllUpstreamsFailed {
            server: self.routed.server.key.clone(),
            attempts,
            last: last_fail.unwrap_or_default(),
        })
    }

    async fn attempt(&self, attempt: usize) -> Result<Step, Error> {
        let ranked = &self.sched.ranked;
        let Some(&idx) = ranked.get(attempt % ranked.len().max(1)) else {
            return Ok(Step::Skip);
        };
        let ep = &self.routed.pool[idx];
        let lora = self.routed.lora.as_deref();
        if lora.is_some_and(|a| !ep.has_lora(a)) {
            // Found without the adapter by an earlier attempt of this request.
            return Ok(Step::Skip);
        }
        if !upstream::pass_breaker(&self.shared, ep, Instant::now()) {
            return Ok(Step::Skip);
        }
        self.acct.attempt(&ep.name, attempt + 1);
        let snap = &self.parsed.snap;
        let sreq = sched_request(&self.parsed.req, &self.tokens, lora, &self.prefetched);
        let cand = &self.sched.cands[idx];
        // Cache-affinity plugins learn the decision now, while the engine prefills, so that
        // the next request with the same new prefix follows this one (Go Kthena's
        // PostSchedule runs only after a successful answer). The owned completion data
        // carries the prefill tokens to count (computed before the plugins recorded it).
        let done = snap.scheduler.on_scheduled(&sreq, cand);
        let mut guard = ep.begin_request(done.prefill_tokens);
        if let Some(s) = self.shared.in_flight_share.get() {
            s.routed(&snap.kv, &ep.id, &sreq);
            s.track(ep, &mut guard).await;
        }
        let done = SchedDone::new(Arc::clone(&snap.scheduler), done);
        match self.send(ep).await? {
            Err(e) => {
                self.acct.attempt_failed();
                drop(guard);
                done.complete(false);
                if let Some(client) = self.tail.as_ref().and_then(Tail::failure) {
                    // The client's body failed (too large, too slow, gone), not the engine.
                    self.acct.upstream_end();
                    return Err(client);
                }
                self.breaker_result(ep, false);
                tracing::debug!(endpoint = %ep.name, attempt, error = ?e, "Upstream attempt failed; trying the next endpoint");
                Ok(Step::Failed {
                    why: format!("{} ({}): {}", ep.name, ep.address, error_chain(&e)),
                    resp: None,
                    stop: false,
                })
            }
            Ok(resp) => self.answered(ep, resp, (guard, done)).await,
        }
    }

    /// Sends the body to `ep`; the outer error is the ModelServer's timeout.
    async fn send(&self, ep: &Arc<Endpoint>) -> Result<Result<Response<UpBody>, SendError>, Error> {
        let dest = Dest::Engine {
            ep,
            path_and_query: &self.path_and_query,
        };
        let body = ReqBody::new(self.body.bytes.clone(), self.tail.clone());
        let fut = upstream::send(&self.shared, dest, &self.headers, body);
        let Some(t) = self.routed.server.timeout else {
            return Ok(fut.await);
        };
        if let Ok(r) = tokio::time::timeout(t, fut).await {
            return Ok(r);
        }
        self.acct.upstream_end();
        self.breaker_result(ep, false);
        Err(Error::UpstreamTimeout {
            endpoint: ep.name.clone(),
            timeout: t,
        })
    }

    async fn answered(
        &self,
        ep: &Arc<Endpoint>,
        resp: Response<UpBody>,
        (guard, done): (LoadGuard, SchedDone),
    ) -> Result<Step, Error> {
        let status = resp.status();
        self.acct.upstream_status(status.as_u16());
        self.breaker_result(ep, !status.is_server_error());
        let lora = self.routed.lora.as_deref();
        // An adapter request answered "model does not exist" is retried on another
        // endpoint that lists the adapter (the list was stale).
        let lora_404 = lora.is_some() && status == StatusCode::NOT_FOUND;
        if lora_404 || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            let (p, b) = resp.into_parts();
            let bytes = Limited::new(b, MAX_ERROR_BODY)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            self.acct.attempt_failed();
            drop(guard);
            done.complete(false);
            let mut stop = false;
            if lora_404 {
                match lora.filter(|_| crate::lora::is_missing_model(&bytes)) {
                    None => stop = true,
                    Some(a) => {
                        ep.set_lora(a, false);
                        stop = !self.routed.pool.iter().any(|e| e.has_lora(a));
                    }
                }
            }
            return Ok(Step::Failed {
                why: format!("{} answered {status}", ep.name),
                resp: Some((p, bytes)),
                stop,
            });
        }
        let mut resp = resp;
        if let Some(t) = self.hung_after_head(&mut resp).await {
            // The client gets 504 rather than a 200 head whose body then breaks; dropping
            // the answer closes the engine connection.
            self.acct.attempt_failed();
            drop(guard);
            done.complete(false);
            self.acct.upstream_end();
            self.breaker_result(ep, false);
            return Err(Error::UpstreamTimeout {
                endpoint: ep.name.clone(),
                timeout: t,
            });
        }
        self.acct.answered(guard, done);
        let injected = self.body.injected_usage;
        Ok(Step::Answer(stream_response(
            resp,
            self.acct.clone(),
            &self.parsed.req,
            injected,
            &self.shared,
        )))
    }

    /// For a non-streamed answer (neither the request nor the answer's `Content-Type` is a
    /// stream), waits up to `upstreamIdleTimeout` for its body to begin before the head goes
    /// to the client; `Some(timeout)` when it did not (the engine hung after its headers).
    async fn hung_after_head(&self, resp: &mut Response<UpBody>) -> Option<Duration> {
        let t = self.shared.upstream_idle_timeout?;
        if self.parsed.req.stream || upstream::is_stream_type(resp.headers()) {
            return None;
        }
        (!resp.body_mut().wait_first_frame(t).await).then_some(t)
    }

    /// Feeds `ep`'s breaker and exports a state change.
    fn breaker_result(&self, ep: &Endpoint, success: bool) {
        record_breaker(&self.shared, ep, success);
    }
}
