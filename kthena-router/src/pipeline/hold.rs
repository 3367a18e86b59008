//! Hold (inside the route stage): a request whose ModelServer has no ready endpoint
//! (`Error::NoReadyEndpoint`; with a `pdGroup`, no ready prefill or no ready decode
//! endpoint) waits in the ModelServer's hold (`crate::coldstart`) instead of failing; once
//! a snapshot gives the ModelServer endpoints, the route is resolved again against that
//! snapshot, which replaces the request's, so the later stages see the new endpoints.
//!
//! Never for the endpoint picker (`pick_only`), external providers or InferencePools, nor
//! with `coldStart.enabled: false` (the 503 `no_ready_endpoint` of Go Kthena).

use std::sync::Arc;

use http::Request;

use super::ctx::Ctx;
use super::gateway::Rewritten;
use super::route::{Target, resolve};
use crate::coldstart::Stay;
use crate::error::Error;
use crate::shared::Shared;

/// The ModelServer (`namespace/name`) a resolution result must wait for, if any: its
/// ModelServer is in the request's snapshot and has no ready endpoint (an InferencePool's
/// `NoReadyEndpoint` never waits).
fn must_wait(req: &Request<Ctx<()>>, r: &Result<(Target, Rewritten), Error>) -> Option<String> {
    let snap = &req.body().parsed.snap;
    let key = match r {
        Err(Error::NoReadyEndpoint { server })
            if req.body().meta.acct.backend_type() == "model_server" =>
        {
            server
        }
        Ok((Target::Server(routed), _)) => &routed.server.key,
        _ => return None,
    };
    let server = snap.servers.get(key)?;
    crate::coldstart::waiting(server).then(|| key.clone())
}

/// Resolves the request's route (`route::resolve`), holding it while its ModelServer has
/// no ready endpoint.
///
/// # Errors
/// The resolution's errors, [`Error::ColdStartQueueFull`] and [`Error::ColdStartTimeout`].
pub(super) async fn resolve_or_hold(
    shared: &Arc<Shared>,
    req: &mut Request<Ctx<()>>,
) -> Result<(Target, Rewritten), Error> {
    let mut stay: Option<Stay<'_>> = None;
    loop {
        let r = resolve(shared, req);
        let holds = !req.body().meta.pick_only && shared.cold_start.config().enabled;
        let Some(server) = must_wait(req, &r).filter(|_| holds || stay.is_some()) else {
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
        let snap = stay.wait(|| shared.snapshot.load_full(), &server).await?;
        if Arc::ptr_eq(&snap, &req.body().parsed.snap) {
            // Nothing new to resolve against (cannot happen: a snapshot that lets the
            // server go on is another one); answer what the resolution answered.
            return r;
        }
        req.body_mut().parsed.snap = snap;
    }
}
