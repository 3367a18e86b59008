//! One P/D request upstream: the pairs of [`PdScheduled`] in turn, each through its
//! connector's flow, until one answers.
//!
//! A pair fails over to the next one on a connect error, a 429/5xx answer of either phase,
//! or a prefill answer a NIXL/Mooncake decode cannot use (not JSON). A 4xx (other than 429)
//! is the client's fault and goes back as it is. Once the decode answer's headers are
//! passed on no other pair is tried: a decode failure mid-stream ends the client's stream
//! with an error ([`crate::upstream::body::ProxyBody`]). `trafficPolicy.timeout` bounds the prefill
//! call up to the end of its answer and the decode call up to its response headers (504).

use std::sync::Arc;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use kthena_sched::LoadGuard;
use rand::Rng;
use tokio::time::Instant;

use super::Connector;
use super::body::{self, Base};
use super::metrics::{PdMetrics, Phase};
use crate::body::{BoxError, RespBody, full};
use crate::error::Error;
use crate::error::error_chain;
use crate::pipeline::ctx::{Meta, Parsed, PdScheduled, Prefetched, Routed, Tokens, sched_request};
use crate::shared::Shared;
use crate::telemetry::accounting::{Accounting, SchedDone};
use crate::upstream::endpoint::Endpoint;
use crate::upstream::{
    self, Dest, SendError, UpBody, record_breaker, stream_response, strip_hop_by_hop,
    upstream_headers,
};

/// Largest prefill answer read (it carries `kv_transfer_params`), bytes.
const MAX_PREFILL_ANSWER: usize = 16 * 1024 * 1024;
/// Largest upstream error body kept to pass on after the last pair, bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends a P/D request upstream (see the module doc).
///
/// # Errors
/// [`Error::PdAttemptsFailed`] when every pair failed without an answer to pass on,
/// [`Error::UpstreamTimeout`] past `trafficPolicy.timeout`.
pub(crate) async fn forward(
    shared: Arc<Shared>,
    head: &http::request::Parts,
    meta: &Meta,
    at: PdRequest,
) -> Result<Response<RespBody>, Error> {
    Plan::new(shared, head, meta, at).run().await
}

/// What the pipeline decided for a P/D request.
#[derive(Debug)]
pub(crate) struct PdRequest {
    /// The parsed body and snapshot.
    pub(crate) parsed: Parsed,
    /// The route match.
    pub(crate) routed: Routed,
    /// The prompt's token ids.
    pub(crate) tokens: Tokens,
    /// The prefetched KV-index lookups.
    pub(crate) prefetched: Prefetched,
    /// The pairs to try.
    pub(crate) sched: PdScheduled,
}

/// Why one attempt failed: for people, the error answer kept, and whether to stop.
struct Failure {
    why: String,
    resp: Option<(http::response::Parts, Bytes)>,
    stop: bool,
}

impl Failure {
    fn transport(phase: &str, ep: &Endpoint, e: &(dyn std::error::Error + 'static)) -> Self {
        Self {
            why: format!("{phase} {} ({}): {}", ep.name, ep.address, error_chain(e)),
            resp: None,
            stop: false,
        }
    }
}

/// A prefill and a decode endpoint, with their indices into [`PdScheduled`].
struct Pair {
    prefill: (usize, Arc<Endpoint>),
    decode: (usize, Arc<Endpoint>),
}

/// One request's P/D plan.
struct Plan {
    shared: Arc<Shared>,
    acct: Accounting,
    parsed: Parsed,
    routed: Routed,
    tokens: Tokens,
    prefetched: Prefetched,
    sched: PdScheduled,
    connector: Connector,
    base: Base,
    injected_usage: bool,
    headers: HeaderMap,
    path_and_query: String,
    path: String,
}

impl Plan {
    fn new(shared: Arc<Shared>, head: &http::request::Parts, meta: &Meta, at: PdRequest) -> Self {
        let PdRequest {
            parsed,
            routed,
            tokens,
            prefetched,
            sched,
        } = at;
        let path = head.uri.path().to_owned();
        let up = routed.upstream_body(&parsed.req, &path);
        let base: Base =
            serde_json::from_slice(&up.bytes).unwrap_or_else(|_| parsed.req.body.clone());
        let connector = routed
            .server
            .pd
            .as_ref()
            .map_or(Connector::Http, |l| l.connector);
        let mut headers = upstream_headers(&head.headers, &meta.id.0);
        crate::gateway::UpstreamHost::apply(&head.extensions, &mut headers);
        Self {
            acct: meta.acct.clone(),
            headers,
            path_and_query: head
                .uri
                .path_and_query()
                .map_or(path.as_str(), |p| p.as_str())
                .to_owned(),
            injected_usage: up.injected_usage,
            shared,
            parsed,
            routed,
            tokens,
            prefetched,
            sched,
            connector,
            base,
            path,
        }
    }

    async fn run(self) -> Result<Response<RespBody>, Error> {
        self.acct.upstream_begin();
        let (mut last, mut last_resp, mut tried) = (None, None, 0);
        for (i, &(p, d)) in self.sched.pairs.iter().enumerate() {
            let Some(pair) = self.pass_breakers(p, d) else {
                continue;
            };
            tried += 1;
            self.acct.attempt(&pair.decode.1.name, i + 1);
            let step = match self.connector {
                Connector::Sglang => self.sglang(&pair).await?,
                _ => self.sequential(&pair).await?,
            };
            match step {
                Ok(answer) => return Ok(answer),
                Err(f) => {
                    self.acct.attempt_failed();
                    tracing::debug!(why = %f.why, "Prefill/decode attempt failed; trying the next pair");
                    last = Some(f.why);
                    if f.resp.is_some() {
                        last_resp = f.resp;
                    }
                    if f.stop {
                        break;
                    }
                }
            }
        }
        self.acct.upstream_end();
        let last = last.unwrap_or_else(|| "every pair's circuit breaker is open".into());
        if let Some((p, b)) = last_resp {
            // The last answer was an error: hand it to the client unchanged.
            self.acct.finish(
                p.status.as_u16(),
                Some(("upstream_response", last)),
                "upstream",
                0,
            );
            let mut r = Response::from_parts(p, full(b));
            strip_hop_by_hop(r.headers_mut());
            return Ok(r);
        }
        Err(Error::PdAttemptsFailed {
            server: self.routed.server.key.clone(),
            pairs: tried,
            last,
        })
    }

    /// The pair, when both endpoints' circuit breakers let a request through.
    fn pass_breakers(&self, p: usize, d: usize) -> Option<Pair> {
        let now = Instant::now();
        let eps = &self.sched.endpoints;
        let both = [&eps[p], &eps[d]];
        if !both.iter().all(|e| e.breaker().available(now)) {
            return None;
        }
        for e in both {
            upstream::pass_breaker(&self.shared, e, now);
        }
        Some(Pair {
            prefill: (p, Arc::clone(&eps[p])),
            decode: (d, Arc::clone(&eps[d])),
        })
    }

    /// `http`, `lmcache`, `nixl`, `mooncake`: prefill, then decode.
    async fn sequential(&self, pair: &Pair) -> Result<Result<Response<RespBody>, Failure>, Error> {
        let params = self.connector.hands_over_params();
        let pre = if params {
            body::nixl_prefill(&self.base)
        } else {
            body::to_bytes(&body::prefill(&self.base))
        };
        let answer = match self.prefill(&pair.prefill, pre).await? {
            Ok(a) => a,
            Err(f) => return Ok(Err(f)),
        };
        let dec = if params {
            match body::kv_transfer_params(&answer) {
                Ok(raw) => body::nixl_decode(&self.base, &raw),
                Err(e) => {
                    let ep = &pair.prefill.1;
                    return Ok(Err(Failure {
                        why: format!(
                            "prefill {}: answer without usable kv_transfer_params: {e}",
                            ep.name
                        ),
                        resp: None,
                        stop: false,
                    }));
                }
            }
        } else {
            body::to_bytes(&self.base)
        };
        let (guard, done, start) = self.begin(&pair.decode, false);
        Ok(match self.decode(&pair.decode.1, dec, start).await? {
            Ok(resp) => Ok(self.answered(resp, (guard, done), start)),
            Err(f) => Err(f),
        })
    }

    /// `sglang`: prefill and decode in flight at once, tied by a fresh `bootstrap_room`. A
    /// failure of either drops (cancels) the other; the decode answer is passed on once
    /// the prefill succeeded too.
    async fn sglang(&self, pair: &Pair) -> Result<Result<Response<RespBody>, Failure>, Error> {
        let room: u64 = self.shared.rng().random::<u64>() >> 1;
        let host = pair.prefill.1.socket.ip().to_string();
        let pre = body::sglang_prefill(&self.base, room);
        let dec = body::sglang_decode(&self.base, room, &host);
        let (guard, done, start) = self.begin(&pair.decode, false);
        let prefill = self.prefill(&pair.prefill, pre);
        let decode = self.decode(&pair.decode.1, dec, start);
        tokio::pin!(prefill, decode);
        let resp = tokio::select! {
            biased;
            p = &mut prefill => {
                if let Err(f) = p? {
                    return Ok(Err(f));
                }
                match decode.await? {
                    Ok(r) => r,
                    Err(f) => return Ok(Err(f)),
                }
            }
            d = &mut decode => {
                let r = match d? {
                    Ok(r) => r,
                    Err(f) => return Ok(Err(f)),
                };
                if let Err(f) = prefill.await? {
                    return Ok(Err(f));
                }
                r
            }
        };
        Ok(Ok(self.answered(resp, (guard, done), start)))
    }

    /// Tells the scheduler about the request and takes an in-flight slot on the endpoint,
    /// with the request's prefill tokens when `prefill` (the prefill endpoint).
    fn begin(
        &self,
        (idx, ep): &(usize, Arc<Endpoint>),
        prefill: bool,
    ) -> (LoadGuard, SchedDone, Instant) {
        let lora = self.routed.lora.as_deref();
        let sreq = sched_request(&self.parsed.req, &self.tokens, lora, &self.prefetched);
        let scheduler = &self.parsed.snap.scheduler;
        let done = scheduler.on_scheduled(&sreq, &self.sched.cands[*idx]);
        let guard = ep.begin_request(if prefill { done.prefill_tokens } else { 0 });
        let done = SchedDone::new(Arc::clone(scheduler), done);
        (guard, done, Instant::now())
    }

    /// The prefill call, read to the end of its answer: the answer body on a 2xx.
    async fn prefill(
        &self,
        target: &(usize, Arc<Endpoint>),
        body: Bytes,
    ) -> Result<Result<Bytes, Failure>, Error> {
        let (guard, done, start) = self.begin(target, true);
        let ep = &target.1;
        let call = async {
            let resp = match self.send(ep, body).await {
                Ok(r) => r,
                Err(e) => return Err(Failure::transport("prefill", ep, &e)),
            };
            let status = resp.status();
            let (parts, b) = resp.into_parts();
            let limit = if status.is_success() {
                MAX_PREFILL_ANSWER
            } else {
                MAX_ERROR_BODY
            };
            let bytes = match Limited::new(b, limit).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => return Err(Failure::transport("prefill", ep, &*e)),
            };
            if status.is_success() {
                return Ok(bytes);
            }
            Err(Failure {
                why: format!("prefill {} answered {status}", ep.name),
                stop: !retryable(status),
                resp: Some((parts, bytes)),
            })
        };
        let out = self.bounded(ep, call).await;
        drop(guard);
        let ok = matches!(out, Ok(Ok(_)));
        done.complete(ok);
        let failed_server = !ok && !matches!(&out, Ok(Err(f)) if f.stop);
        self.breaker_result(ep, !failed_server);
        let m = &self.shared.metrics.pd;
        m.observe(
            Phase::Prefill,
            &self.parsed.req.model,
            &self.path,
            ok,
            start.elapsed().as_secs_f64(),
        );
        out
    }

    /// The decode call up to its response headers: the answer to pass on (2xx, or a 4xx
    /// other than 429), or why it failed.
    async fn decode(
        &self,
        ep: &Arc<Endpoint>,
        body: Bytes,
        start: Instant,
    ) -> Result<Result<Response<UpBody>, Failure>, Error> {
        let call = async {
            let resp = match self.send(ep, body).await {
                Ok(r) => r,
                Err(e) => return Err(Failure::transport("decode", ep, &e)),
            };
            let status = resp.status();
            self.acct.upstream_status(status.as_u16());
            if !retryable(status) {
                return Ok(resp);
            }
            let (parts, b) = resp.into_parts();
            let bytes = Limited::new(b, MAX_ERROR_BODY)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            Err(Failure {
                why: format!("decode {} answered {status}", ep.name),
                resp: Some((parts, bytes)),
                stop: false,
            })
        };
        let out = self.bounded(ep, call).await;
        let ok = matches!(out, Ok(Ok(_)));
        self.breaker_result(ep, ok);
        if !ok {
            let m = &self.shared.metrics.pd;
            m.observe(
                Phase::Decode,
                &self.parsed.req.model,
                &self.path,
                false,
                start.elapsed().as_secs_f64(),
            );
        }
        out
    }

    /// Runs `call` within `trafficPolicy.timeout` (504 past it).
    async fn bounded<T>(
        &self,
        ep: &Endpoint,
        call: impl std::future::Future<Output = T>,
    ) -> Result<T, Error> {
        let Some(t) = self.routed.server.timeout else {
            return Ok(call.await);
        };
        match tokio::time::timeout(t, call).await {
            Ok(r) => Ok(r),
            Err(_) => {
                self.acct.upstream_end();
                Err(Error::UpstreamTimeout {
                    endpoint: ep.name.clone(),
                    timeout: t,
                })
            }
        }
    }

    async fn send(&self, ep: &Endpoint, body: Bytes) -> Result<Response<UpBody>, SendError> {
        let dest = Dest::Engine {
            ep,
            path_and_query: &self.path_and_query,
        };
        upstream::send(&self.shared, dest, &self.headers, body).await
    }

    /// The decode answer streamed to the client, holding the decode endpoint's slot.
    fn answered(
        &self,
        resp: Response<UpBody>,
        (guard, done): (LoadGuard, SchedDone),
        start: Instant,
    ) -> Response<RespBody> {
        self.acct.answered(guard, done);
        let resp = stream_response(
            resp,
            self.acct.clone(),
            &self.parsed.req,
            self.injected_usage,
            &self.shared,
        );
        let m = &self.shared.metrics.pd;
        resp.map(|b| {
            let body = DecodeBody::new(b, m, &self.parsed.req.model, &self.path, start);
            BodyExt::boxed_unsync(body)
        })
    }

    fn breaker_result(&self, ep: &Endpoint, success: bool) {
        record_breaker(&self.shared, ep, success);
    }
}

/// Whether another pair may do better: 429 and 5xx.
fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// The decode answer's body: records the decode phase when the body ends (`200`), fails or
/// is dropped before its end (`500`).
pub(crate) struct DecodeBody {
    inner: RespBody,
    record: Option<Box<dyn FnOnce(bool) + Send>>,
}

impl std::fmt::Debug for DecodeBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeBody").finish_non_exhaustive()
    }
}

impl DecodeBody {
    /// Wraps `inner`; the phase started at `start`.
    pub(crate) fn new(
        inner: RespBody,
        metrics: &PdMetrics,
        model: &str,
        path: &str,
        start: Instant,
    ) -> Self {
        let (m, model, path) = (metrics.clone(), model.to_owned(), path.to_owned());
        let record = move |ok: bool| {
            let secs = start.elapsed().as_secs_f64();
            m.observe(Phase::Decode, &model, &path, ok, secs);
        };
        Self {
            inner,
            record: Some(Box::new(record)),
        }
    }

    fn done(&mut self, ok: bool) {
        if let Some(r) = self.record.take() {
            r(ok);
        }
    }
}

impl Body for DecodeBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.done(true),
            Poll::Ready(Some(Err(_))) => this.done(false),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.done(true),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for DecodeBody {
    fn drop(&mut self) {
        self.done(false);
    }
}
