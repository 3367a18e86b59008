//! Endpoint-picker mode: the router as Envoy's external processor (`ext_proc`), the
//! protocol of the Gateway API Inference Extension's endpoint picker (EPP).
//!
//! Envoy sends each request's headers and body (`BUFFERED`, or GIE's `FULL_DUPLEX_STREAMED`
//! streaming mode, where the headers are answered once the body is whole) over a gRPC stream
//! (`envoy.service.ext_proc.v3.ExternalProcessor/Process`). The picker runs the router's own
//! pipeline on it (parse → match route → admit → subset hint → rate limit → queue →
//! tokenize → schedule) and, instead of proxying, answers with the chosen endpoints: the
//! `x-gateway-destination-endpoint` header and the same value under
//! `x-gateway-destination-endpoint` in the `envoy.lb` dynamic-metadata namespace, as
//! `ip:port` or `ip:port,ip:port,...` (the pick first, then the fallbacks Envoy's
//! `override_host` load-balancing policy tries on retries). A request that cannot be
//! scheduled gets an `ImmediateResponse` with the router's OpenAI-shaped error (503 when no
//! endpoint is ready). Source of the protocol: gateway-api-inference-extension
//! `docs/proposals/004-endpoint-picker-protocol`.
//!
//! In-flight accounting follows the router's: the chosen endpoint's slot is taken at the
//! pick, its prefill counters are given back at the first response byte (at the response
//! headers when Envoy does not send the body), and the slot at the end of the response body,
//! or when the stream ends (Envoy closes it when the HTTP stream ends). When Envoy reports the endpoint that served the request
//! (`x-gateway-destination-endpoint-served` in `envoy.lb`, the `override_host` policy's
//! `selected_host_key`), a fallback's slot replaces the pick's and the pick's circuit
//! breaker records the failure.

mod pick;
mod session;
mod wire;

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures_util::Stream;
use http_body_util::Full;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::EndpointPickerConfig;
use crate::pipeline::BoxHttp;
use crate::shared::Shared;

/// What every ext_proc stream shares.
#[derive(Clone)]
pub(crate) struct Picker {
    shared: Arc<Shared>,
    stack: BoxHttp<crate::pipeline::Inbound<Full<Bytes>>>,
    max_endpoints: usize,
}

impl std::fmt::Debug for Picker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Picker")
            .field("max_endpoints", &self.max_endpoints)
            .finish_non_exhaustive()
    }
}

impl Picker {
    fn new(shared: Arc<Shared>, cfg: &EndpointPickerConfig) -> Self {
        let stack = pick::stack(&shared);
        Self {
            shared,
            stack,
            max_endpoints: cfg.max_endpoints,
        }
    }
}

/// The response stream of one ext_proc call.
type ProcessStream =
    Pin<Box<dyn Stream<Item = Result<ProcessingResponse, tonic::Status>> + Send + 'static>>;

#[tonic::async_trait]
impl ExternalProcessor for Picker {
    type ProcessStream = ProcessStream;

    async fn process(
        &self,
        request: tonic::Request<tonic::Streaming<ProcessingRequest>>,
    ) -> Result<tonic::Response<ProcessStream>, tonic::Status> {
        let inbound = request.into_inner();
        let session = session::Session::new(self.clone());
        let queue = std::collections::VecDeque::new();
        let stream = futures_util::stream::unfold(
            (inbound, session, queue),
            |(mut inbound, mut session, mut queue)| async move {
                loop {
                    if let Some(resp) = queue.pop_front() {
                        return Some((Ok(resp), (inbound, session, queue)));
                    }
                    match inbound.message().await {
                        Ok(Some(msg)) => queue.extend(session.handle(msg).await),
                        Ok(None) => {
                            session.end();
                            return None;
                        }
                        Err(status) => {
                            tracing::debug!(%status, "ext_proc stream ended with an error");
                            session.end();
                            return None;
                        }
                    }
                }
            },
        );
        Ok(tonic::Response::new(Box::pin(stream)))
    }
}

/// Serves the external processor on `listener` until `cancel` (spawned on `tasks`).
pub(crate) fn spawn(
    listener: TcpListener,
    shared: Arc<Shared>,
    cfg: &EndpointPickerConfig,
    cancel: &CancellationToken,
    tasks: &TaskTracker,
) {
    let picker = Picker::new(shared, cfg);
    let cancel = cancel.clone();
    tasks.spawn(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let served = tonic::transport::Server::builder()
            .add_service(ExternalProcessorServer::new(picker))
            .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "Endpoint picker stopped");
        }
    });
}
