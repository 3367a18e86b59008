//! The inference request path as tower layers, composed with `ServiceBuilder` in
//! [`stack`]:
//!
//! parse → match route (holding the request while its ModelServer has no ready endpoint,
//! `hold`) → admit → rate limit → fairness queue → tokenize → schedule → forward
//! (`upstream::send`, with retries).
//!
//! Authentication runs before the stack, in the front service (`server::service`), which
//! also answers `/v1/models` and the LoRA admin calls. Each stage is a `FooLayer`/`Foo<S>`
//! pair: it takes the typed state the earlier stages built ([`ctx`]: `Request<Ctx<S>>`),
//! adds its own, and calls the next service, or fails with a typed [`Error`] that the front
//! service turns into the OpenAI-shaped answer (the one conversion point, `error`). Stages
//! report to the request's [`Accounting`](crate::telemetry::accounting::Accounting), which
//! settles when the response body ends. The endpoint picker (`epp`) runs the same stages up
//! to schedule, with its own last service.

mod admit;
pub(crate) mod ctx;
mod forward;
mod gateway;
mod hold;
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
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

pub(crate) use admit::AdmitLayer;
pub(crate) use ctx::{Ctx, Inbound, Meta};
pub(crate) use forward::Forward;
pub(crate) use gateway::effective_path;
pub(crate) use parse::{ParseLayer, is_inference_path};
pub(crate) use queue::{QueueLayer, install as install_queues};
pub(crate) use ratelimit::RateLimitLayer;
pub(crate) use route::RouteLayer;
pub(crate) use schedule::ScheduleLayer;
pub(crate) use tokenize::TokenizeLayer;

use crate::body::RespBody;
use crate::error::Error;
use crate::shared::Shared;

/// A boxed stage stack taking requests with body `B` (`BoxHttp` in linkerd's `svc.rs`).
pub(crate) type BoxHttp<B> = BoxCloneSyncService<Request<B>, Response<RespBody>, Error>;

/// The future every stage returns.
pub(crate) type BoxFut = Pin<Box<dyn Future<Output = Result<Response<RespBody>, Error>> + Send>>;

/// The whole inference stack over `shared`, for `/v1/*` requests.
pub(crate) fn stack(shared: &Arc<Shared>) -> BoxHttp<Inbound<Incoming>> {
    let svc = ServiceBuilder::new()
        .layer(ParseLayer::new(Arc::clone(shared)))
        .layer(RouteLayer::new(Arc::clone(shared)))
        .layer(AdmitLayer::new(Arc::clone(shared)))
        .layer(RateLimitLayer::new(Arc::clone(shared)))
        .layer(QueueLayer::new(Arc::clone(shared)))
        .layer(TokenizeLayer::new(Arc::clone(shared)))
        .layer(ScheduleLayer::new(Arc::clone(shared)))
        .service(Forward::new(Arc::clone(shared)));
    BoxCloneSyncService::new(svc)
}

/// Declares a stage: `$layer` (holds the shared state) builds `$svc<S>`, a service of
/// `$req` over an inner service of `$out`, whose `call` runs
/// `$run(shared, request, ready inner service)`.
macro_rules! stage {
    ($(#[$doc:meta])* $layer:ident, $svc:ident, $req:ty => $out:ty, $run:path) => {
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
                    $out,
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
