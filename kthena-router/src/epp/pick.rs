//! The picker's pipeline: the router's stages up to scheduling, a stage narrowing the pool
//! to Envoy's subset hint, and a last service that hands the decision back in the
//! response's extensions instead of proxying.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder};

use crate::body::{RespBody, full};
use crate::error::Error;
use crate::pipeline::ctx::{Decided, Decision, Parsed, Prefetched, Routed, Scheduled, Tokens};
use crate::pipeline::{
    AdmitLayer, BoxFut, BoxHttp, Ctx, Inbound, ParseLayer, QueueLayer, RateLimitLayer, RouteLayer,
    ScheduleLayer, TokenizeLayer, stage,
};
use crate::shared::Shared;

/// The endpoints Envoy allows (`x-gateway-destination-endpoint-subset`).
#[derive(Debug, Clone)]
pub(super) struct Subset(pub(super) Arc<Vec<SocketAddr>>);

/// The scheduling decision, left in the response's extensions.
#[derive(Debug, Clone)]
pub(super) struct Picked {
    pub(super) parsed: Parsed,
    pub(super) routed: Routed,
    pub(super) tokens: Tokens,
    pub(super) prefetched: Prefetched,
    pub(super) sched: Scheduled,
}

/// The picker's stack over `shared`: the router's stages with [`SubsetLayer`] after
/// admission and [`Decide`] in place of the proxy.
pub(super) fn stack(shared: &Arc<Shared>) -> BoxHttp<Inbound<Full<Bytes>>> {
    let svc = ServiceBuilder::new()
        .layer(ParseLayer::new(Arc::clone(shared)))
        .layer(RouteLayer::new(Arc::clone(shared)))
        .layer(AdmitLayer::new(Arc::clone(shared)))
        .layer(SubsetLayer::new(Arc::clone(shared)))
        .layer(RateLimitLayer::new(Arc::clone(shared)))
        .layer(QueueLayer::new(Arc::clone(shared)))
        .layer(TokenizeLayer::new(Arc::clone(shared)))
        .layer(ScheduleLayer::new(Arc::clone(shared)))
        .service(Decide);
    BoxCloneSyncService::new(svc)
}

stage!(
    /// Keeps only the pool endpoints Envoy's subset hint lists (503 when none is left).
    SubsetLayer,
    SubsetFilter,
    Request<Ctx<Routed>> => Request<Ctx<Routed>>,
    narrow
);

async fn narrow<S>(
    _shared: Arc<Shared>,
    mut req: Request<Ctx<Routed>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Routed>>, Response = Response<RespBody>, Error = Error>,
{
    if let Some(Subset(allowed)) = req.extensions().get::<Subset>().cloned() {
        let routed = &mut req.body_mut().at;
        let pool: Vec<_> = routed
            .pool
            .iter()
            .filter(|e| allowed.contains(&e.socket))
            .cloned()
            .collect();
        if pool.is_empty() {
            return Err(Error::NoReadyEndpoint {
                server: routed.server.key.clone(),
            });
        }
        routed.pool = Arc::new(pool);
    }
    inner.call(req).await
}

/// The innermost service: the decision goes back as a [`Picked`] response extension.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decide;

impl Service<Request<Ctx<Decided>>> for Decide {
    type Response = Response<RespBody>;
    type Error = Error;
    type Future = BoxFut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Ctx<Decided>>) -> BoxFut {
        let Ctx { parsed, at, .. } = req.into_body();
        let picked = match at.decision {
            Decision::Pd(_) => Err(Error::NotPickable {
                reason: "a prefill/decode ModelServer needs two upstream requests".into(),
            }),
            Decision::Ranked(sched) => Ok(Picked {
                parsed,
                routed: at.routed,
                tokens: at.tokens,
                prefetched: at.prefetched,
                sched,
            }),
        };
        Box::pin(async move {
            let mut resp = Response::new(full(Bytes::new()));
            resp.extensions_mut().insert(picked?);
            Ok(resp)
        })
    }
}
