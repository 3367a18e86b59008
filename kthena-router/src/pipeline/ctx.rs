//! The typed per-request state of the pipeline, carried in the request's body slot.
//!
//! The front service hands the stack a `Request<Inbound<B>>` (the client body plus
//! [`Meta`]); the parse stage reads the body and passes on a `Request<Ctx<()>>`; each later
//! stage takes the state the earlier ones built and passes on its own:
//!
//! | stage | takes | passes on |
//! |---|---|---|
//! | parse | `Inbound<B>` | `Ctx<()>` ([`Parsed`]) |
//! | route | `Ctx<()>` | `Ctx<Routed>` |
//! | admit, rate limit, queue | `Ctx<Routed>` | `Ctx<Routed>` (pool narrowed) |
//! | tokenize | `Ctx<Routed>` | `Ctx<Tokenized>` |
//! | schedule | `Ctx<Tokenized>` | `Ctx<Decided>` |
//! | forward | `Ctx<Decided>` | the answer |
//!
//! A stage that needs something an earlier stage did not build does not compile.

use std::sync::Arc;

use kthena_sched::{Candidate, Request as SchedRequest};

use crate::auth::UserId;
use crate::body::HeldBody;
use crate::body::tail::Tail;
use crate::discovery::{Server, Snapshot};
use crate::telemetry::accounting::Accounting;
use crate::upstream::endpoint::Endpoint;
use kthena_openai::{ParsedRequest, UpstreamBody};

/// The longest client `x-request-id` kept, bytes (W3C trace ids are 55, UUIDs 36).
pub(crate) const MAX_REQUEST_ID_BYTES: usize = 256;

/// The request id (`x-request-id` or a new UUID), sent upstream and answered.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) Arc<str>);

impl RequestId {
    /// The client's `x-request-id` when it is 1 to [`MAX_REQUEST_ID_BYTES`] bytes of
    /// visible ASCII, else a new UUID v4 (a client's id is logged, sent to the engine and
    /// answered, so its size is bounded).
    pub(crate) fn from_headers(headers: &http::HeaderMap) -> Arc<str> {
        headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= MAX_REQUEST_ID_BYTES)
            .map_or_else(
                || {
                    let mut buf = uuid::Uuid::encode_buffer();
                    Arc::from(&*uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf))
                },
                Into::into,
            )
    }
}

/// What every stage knows of a request from before its body was read.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// The request's accounting (metrics, access log, slots), settled when it ends.
    pub(crate) acct: Accounting,
    /// The request id.
    pub(crate) id: RequestId,
    /// The authenticated user (JWT `sub`), when authentication is on.
    pub(crate) user: Option<UserId>,
    /// The endpoint picker runs the request: stages that would answer it themselves (an
    /// external provider's route) fail with `Error::NotPickable` instead.
    pub(crate) pick_only: bool,
}

/// A request as the front service hands it to the stack: the client body and [`Meta`].
#[derive(Debug)]
pub(crate) struct Inbound<B> {
    /// The client body, not read yet.
    pub(crate) body: B,
    /// What is known of the request.
    pub(crate) meta: Meta,
}

/// The parsed body and the routing snapshot the request is served from.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    /// The parsed body.
    pub(crate) req: Arc<ParsedRequest>,
    /// The snapshot loaded once for the whole request.
    pub(crate) snap: Arc<Snapshot>,
}

/// A request after parse: [`Meta`], [`Parsed`], the body's budget reservation, and `S`,
/// what the stages after parse built.
#[derive(Debug)]
pub(crate) struct Ctx<S> {
    /// What is known of the request.
    pub(crate) meta: Meta,
    /// The parsed body and snapshot.
    pub(crate) parsed: Parsed,
    /// The body's reservation on the shared body budget, held until the request is done.
    pub(crate) held: HeldBody,
    /// The rest of a multipart upload after its `model` field, not read yet: the forward
    /// stage streams it to the engine after [`Parsed::req`]'s bytes (the prefix); `None`
    /// when the whole body is held.
    pub(crate) tail: Option<Tail>,
    /// The state of the stages after parse.
    pub(crate) at: S,
}

impl<S> Ctx<S> {
    /// The same request with `at` in place of the current state.
    pub(crate) fn with<T>(self, at: T) -> Ctx<T> {
        Ctx {
            meta: self.meta,
            parsed: self.parsed,
            held: self.held,
            tail: self.tail,
            at,
        }
    }
}

/// The route match: ModelServer, upstream model and the endpoints it may go to.
#[derive(Debug, Clone)]
pub(crate) struct Routed {
    /// The ModelServer.
    pub(crate) server: Arc<Server>,
    /// The LoRA adapter requested (the request's model), when the route matched one.
    pub(crate) lora: Option<String>,
    /// The model sent upstream.
    pub(crate) upstream_model: String,
    /// The endpoints the request may go to (narrowed by admission).
    pub(crate) pool: Arc<Vec<Arc<Endpoint>>>,
}

impl Routed {
    /// The body sent upstream for `path`: the model rewritten to the ModelServer's
    /// `spec.model` unless a LoRA adapter was requested (`/v1/responses` in its own shape).
    pub(crate) fn upstream_body(&self, parsed: &ParsedRequest, path: &str) -> UpstreamBody {
        let rewrite = self
            .lora
            .is_none()
            .then_some(self.server.model.as_deref())
            .flatten();
        if path == "/v1/responses" {
            parsed.upstream_responses_body(rewrite)
        } else {
            parsed.upstream_body(rewrite)
        }
    }
}

/// The prompt's token ids, when a plugin needs them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens(pub(crate) Option<Arc<Vec<u32>>>);

/// After tokenize: the route match and the token ids.
#[derive(Debug, Clone)]
pub(crate) struct Tokenized {
    /// The route match.
    pub(crate) routed: Routed,
    /// The prompt's token ids.
    pub(crate) tokens: Tokens,
}

/// The KV-index lookups of a remote index ([`kthena_sched::Scheduler::prepare`]), answered
/// off the async threads before scheduling; `None` when there was nothing to fetch ahead.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prefetched(pub(crate) Option<Arc<kthena_sched::Prefetch>>);

/// The scheduler's decision over [`Routed::pool`].
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    /// The scheduler's view of each pool endpoint (same order).
    pub(crate) cands: Arc<Vec<Candidate>>,
    /// Pool indices, best first.
    pub(crate) ranked: Arc<Vec<usize>>,
}

/// The prefill/decode pairs to try, best first.
#[derive(Debug, Clone)]
pub(crate) struct PdScheduled {
    /// Every endpoint of the ModelServer that the pairs index (prefill and decode).
    pub(crate) endpoints: Arc<Vec<Arc<Endpoint>>>,
    /// The scheduler's view of [`PdScheduled::endpoints`] (same order).
    pub(crate) cands: Arc<Vec<Candidate>>,
    /// `(prefill, decode)` indices into the endpoints, in decode rank order.
    pub(crate) pairs: Arc<Vec<(usize, usize)>>,
}

/// What the schedule stage decided.
#[derive(Debug, Clone)]
pub(crate) enum Decision {
    /// One ranking of the pool (aggregated serving).
    Ranked(Scheduled),
    /// Prefill/decode pairs (a ModelServer with a `pdGroup`).
    Pd(PdScheduled),
}

/// After schedule: everything the forward stage needs.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    /// The route match.
    pub(crate) routed: Routed,
    /// The prompt's token ids.
    pub(crate) tokens: Tokens,
    /// The prefetched KV-index lookups.
    pub(crate) prefetched: Prefetched,
    /// The decision.
    pub(crate) decision: Decision,
}

/// The scheduler's view of a request: model, prompt, token ids, LoRA adapter, session, and
/// the prefetched KV-index lookups.
pub(crate) fn sched_request<'a>(
    parsed: &'a ParsedRequest,
    tokens: &'a Tokens,
    lora: Option<&'a str>,
    prefetched: &'a Prefetched,
) -> SchedRequest<'a> {
    let mut sreq = SchedRequest::new(&parsed.model).with_prompt(&parsed.prompt_text);
    if let Some(p) = &prefetched.0 {
        sreq = sreq.with_prefetch(p);
    }
    if let Some(t) = &tokens.0 {
        sreq = sreq.with_token_ids(t);
    }
    if let Some(l) = lora {
        sreq = sreq.with_lora(l);
    }
    if let Some(u) = &parsed.user {
        sreq = sreq.with_session(u);
    }
    sreq
}

#[cfg(test)]
mod tests;
