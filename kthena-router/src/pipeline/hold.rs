//! Hold (inside the route stage): a request whose ModelServer has no ready endpoint
//! (`Error::NoReadyEndpoint`; with a `pdGroup`, no ready prefill or no ready decode
//! endpoint) waits in the ModelServer's hold (`crate::coldstart`) instead of failing; once
//! a snapshot gives the ModelServer endpoints, the route is resolved again against that
//! snapshot, which replaces the request's, so the later stages see the new endpoints.
//!
//! Never for the endpoint picker (`pick_only`), external providers or InferencePools, nor
//! with `coldStart.enabled: false` (the 503 `no_ready_endpoint` of Go Kthena).

use std::sync::Arc;
use std::time::Duration;

use http::Request;

use super::ctx::Ctx;
use super::gateway::Rewritten;
use super::route::{Target, resolve};
use crate::coldstart::Stay;
use crate::error::Error;
use crate::shared::Shared;

/// How often a held LoRA request looks again for its adapter on fresh endpoints.
const LORA_POLL: Duration = Duration::from_millis(100);

/// The ModelServer (`namespace/name`) a resolution result must wait for, if any, and how
/// often to look again besides new snapshots: its ModelServer is in the request's snapshot
/// and has no ready endpoint (an InferencePool's `NoReadyEndpoint` never waits); or the
/// request names a LoRA adapter no endpoint lists while an endpoint has not reported its
/// model list yet (an engine just woken: its `/v1/models` is read by the next scrape).
fn must_wait(
    req: &Request<Ctx<()>>,
    r: &Result<(Target, Rewritten), Error>,
) -> Option<(String, Option<Duration>)> {
    let snap = &req.body().parsed.snap;
    let backend_is_server = req.body().meta.acct.backend_type() == "model_server";
    let key = match r {
        Err(Error::NoReadyEndpoint { server }) if backend_is_server => server,
        Err(Error::LoraAdapterNotLoaded { server, .. }) if backend_is_server => {
            let s = snap.servers.get(server)?;
            let fresh = s.endpoints.iter().any(|e| !e.state().models_known);
            return fresh.then(|| (server.clone(), Some(LORA_POLL)));
        }
        // The resolved server itself: no lookup on the warm path.
        Ok((Target::Server(routed), _)) => {
            let s = &routed.server;
            return crate::coldstart::waiting(s).then(|| (s.key.clone(), None));
        }
        _ => return None,
    };
    let server = snap.servers.get(key)?;
    crate::coldstart::waiting(server).then(|| (key.clone(), None))
}

/// Resolves the request's route (`route::resolve`), holding it while its ModelServer has
/// no ready endpoint; a held request resolves its route again on every new snapshot (it
/// follows a route that changed) and goes on with the newest snapshot.
///
/// # Errors
/// The resolution's errors, [`Error::ColdStartQueueFull`], [`Error::ColdStartTimeout`] and
/// [`Error::ColdStartShuttingDown`].
pub(super) async fn resolve_or_hold(
    shared: &Arc<Shared>,
    req: &mut Request<Ctx<()>>,
) -> Result<(Target, Rewritten), Error> {
    let mut stay: Option<Stay<'_>> = None;
    loop {
        let r = resolve(shared, req);
        let holds = !req.body().meta.pick_only && shared.cold_start.config().enabled;
        let Some((server, poll)) = must_wait(req, &r).filter(|_| holds || stay.is_some()) else {
            if let Some(stay) = stay.as_mut() {
                stay.leave();
            }
            return r;
        };
        let stay = stay.get_or_insert_with(|| {
            let ctx = req.body();
            Stay::new(
                &shared.cold_start,
                &ctx.parsed.req.model,
                Some(ctx.meta.acct.clone()),
            )
            .with_drain_cut(shared.drain_cut.clone())
        });
        req.body_mut().parsed.snap = stay
            .wait(|| shared.snapshot.load_full(), &server, poll)
            .await?;
    }
}
