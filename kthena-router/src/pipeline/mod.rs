//! The inference request path as tower layers, composed with `ServiceBuilder` in
//! [`stack`]:
//!
//! parse → (authenticate: slot for JWT) → match route → admit → (rate limit, fairness
//! queue: slots) → tokenize → schedule → proxy with retries.
//!
//! Each stage is a `FooLayer`/`Foo<S>` pair: it reads what earlier stages left in the
//! request's extensions ([`Parsed`], [`Routed`], [`Tokens`], [`Scheduled`]), adds its own,
//! and calls the next service, or fails with a typed [`Error`] that
//! [`RouterService`](crate::RouterService) turns into the OpenAI-shaped answer (the one
//! conversion point). Stages report to the request's [`Accounting`](crate::accounting::Accounting), which settles when
//! the response body ends. A new stage (JWT, token rate limits, fairness) is one more
//! `.layer(..)` line in [`stack`].

mod admit;
mod forward;
mod gateway;
mod parse;
mod queue;
mod ratelimit;
mod route;
mod schedule;
mod tokenize;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use kthena_sched::Candidate;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

pub(crate) use admit::AdmitLayer;
pub(crate) use forward::{
    Forward, record_breaker, send_upstream, stream_response, strip_hop_by_hop, upstream_headers,
};
pub(crate) use parse::{ParseLayer, is_inference_path};
pub(crate) use queue::{QueueLayer, install as install_queues};
pub(crate) use ratelimit::RateLimitLayer;
pub(crate) use route::RouteLayer;
pub(crate) use schedule::{ScheduleLayer, sched_request};
pub(crate) use tokenize::TokenizeLayer;

use kthena_openai::{ParsedRequest, UpstreamBody};

use crate::body::RespBody;
use crate::discovery::{Server, Snapshot};
use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::shared::Shared;

/// A boxed stage stack taking requests with body `B` (`BoxHttp` in linkerd's `svc.rs`).
pub(crate) type BoxHttp<B> = BoxCloneSyncService<Request<B>, Response<RespBody>, Error>;

/// The future every stage returns.
pub(crate) type BoxFut = Pin<Box<dyn Future<Output = Result<Response<RespBody>, Error>> + Send>>;

/// The whole inference stack over `shared`, for `/v1/*` requests that carry an
/// [`Accounting`](crate::accounting::Accounting) and a [`RequestId`] extension.
pub(crate) fn stack(shared: &Arc<Shared>) -> BoxHttp<Incoming> {
    let svc = ServiceBuilder::new()
        .layer(ParseLayer::new(Arc::clone(shared)))
        // Authentication (JWT, issue 14 part 2) goes here.
        .layer(RouteLayer::new(Arc::clone(shared)))
        .layer(AdmitLayer::new(Arc::clone(shared)))
        .layer(RateLimitLayer::new(Arc::clone(shared)))
        .layer(QueueLayer::new(Arc::clone(shared)))
        .layer(TokenizeLayer::new(Arc::clone(shared)))
        .layer(ScheduleLayer::new(Arc::clone(shared)))
        .service(Forward::new(Arc::clone(shared)));
    BoxCloneSyncService::new(svc)
}

/// Marks a request the endpoint picker runs (endpoint-picker mode): stages that would answer it
/// themselves (an external provider's route) fail with [`Error::NotPickable`] instead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PickOnly;

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

/// The parsed body and the routing snapshot the request is served from.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    /// The parsed body.
    pub(crate) req: Arc<ParsedRequest>,
    /// The snapshot loaded once for the whole request.
    pub(crate) snap: Arc<Snapshot>,
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
#[derive(Debug, Clone)]
pub(crate) struct Tokens(pub(crate) Option<Arc<Vec<u32>>>);

/// The KV-index lookups of a remote index ([`kthena_sched::Scheduler::prepare`]), answered
/// off the async threads before scheduling; `None` when there was nothing to fetch ahead.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prefetched(pub(crate) Option<Arc<kthena_sched::Prefetch>>);

impl Prefetched {
    /// The prefetch of `req`, if the schedule stage left one.
    pub(crate) fn of<B>(req: &http::Request<B>) -> Self {
        req.extensions().get::<Self>().cloned().unwrap_or_default()
    }
}

/// The scheduler's decision over [`Routed::pool`].
#[derive(Debug, Clone)]
pub(crate) struct Scheduled {
    /// The scheduler's view of each pool endpoint (same order).
    pub(crate) cands: Arc<Vec<Candidate>>,
    /// Pool indices, best first.
    pub(crate) ranked: Arc<Vec<usize>>,
}

/// The extension `T` an earlier stage left, or [`Error::PipelineMissing`].
pub(crate) fn ext<T: Clone + Send + Sync + 'static>(
    req: &Request<()>,
    missing: &'static str,
) -> Result<T, Error> {
    req.extensions()
        .get::<T>()
        .cloned()
        .ok_or(Error::PipelineMissing { missing })
}

/// Declares a stage: `$layer` (holds the shared state) builds `$svc<S>`, whose `call` runs
/// `$run(shared, request, ready inner service)`.
macro_rules! stage {
    ($(#[$doc:meta])* $layer:ident, $svc:ident, $req:ty, $run:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub(crate) struct $layer {
            shared: std::sync::Arc<crate::shared::Shared>,
        }

        impl $layer {
            /// The layer over the router's shared state.
            pub(crate) fn new(shared: std::sync::Arc<crate::shared::Shared>) -> Self {
                Self { shared }
            }
        }

        impl<S> tower::Layer<S> for $layer {
            type Service = $svc<S>;
            fn layer(&self, inner: S) -> $svc<S> {
                $svc {
                    inner,
                    shared: std::sync::Arc::clone(&self.shared),
                }
            }
        }

        #[doc = concat!("The service of [`", stringify!($layer), "`].")]
        #[derive(Debug, Clone)]
        pub(crate) struct $svc<S> {
            inner: S,
            shared: std::sync::Arc<crate::shared::Shared>,
        }

        impl<S> tower::Service<$req> for $svc<S>
        where
            S: tower::Service<
                    http::Request<()>,
                    Response = http::Response<crate::body::RespBody>,
                    Error = crate::error::Error,
                > + Clone
                + Send
                + 'static,
            S::Future: Send,
        {
            type Response = http::Response<crate::body::RespBody>;
            type Error = crate::error::Error;
            type Future = crate::pipeline::BoxFut;

            fn poll_ready(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), crate::error::Error>> {
                self.inner.poll_ready(cx)
            }

            fn call(&mut self, req: $req) -> Self::Future {
                // Keep a clone; hand the service that was polled ready to the call.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                Box::pin($run(std::sync::Arc::clone(&self.shared), req, inner))
            }
        }
    };
}
pub(crate) use stage;

#[cfg(test)]
pub(crate) mod test_util;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_id_is_the_clients_or_a_new_uuid_v4() {
        let mut h = http::HeaderMap::new();
        let a = RequestId::from_headers(&h);
        let b = RequestId::from_headers(&h);
        assert_ne!(a, b);
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 4);
        assert_eq!(&*a, u.hyphenated().to_string());
        h.insert("x-request-id", http::HeaderValue::from_static("abc-1"));
        assert_eq!(&*RequestId::from_headers(&h), "abc-1");
        h.insert("x-request-id", http::HeaderValue::from_static(""));
        assert_eq!(RequestId::from_headers(&h).len(), 36);
        // Regression: a 10 KB id was logged, forwarded and echoed whole.
        let long = "a".repeat(MAX_REQUEST_ID_BYTES);
        h.insert("x-request-id", http::HeaderValue::from_str(&long).unwrap());
        assert_eq!(&*RequestId::from_headers(&h), long);
        let longer = "a".repeat(MAX_REQUEST_ID_BYTES + 1);
        h.insert(
            "x-request-id",
            http::HeaderValue::from_str(&longer).unwrap(),
        );
        assert!(uuid::Uuid::parse_str(&RequestId::from_headers(&h)).is_ok());
    }
}
