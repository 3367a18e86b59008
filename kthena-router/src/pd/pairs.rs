//! Pairing: the prefill/decode pairs of one request, from `kthena-sched`'s
//! `Scheduler::schedule_pd` over the admitted endpoints of a `pdGroup` ModelServer.

use std::sync::Arc;

use http::Request;
use kthena_sched::{Candidate, PdRole};

use crate::endpoint::Endpoint;
use crate::error::Error;
use crate::pipeline::{Parsed, Routed, Tokens, ext};

/// The P/D scheduling decision: the candidates and the pairs to try, best first.
#[derive(Debug, Clone)]
pub(crate) struct PdScheduled {
    /// The endpoints of [`PdScheduled::cands`], same order.
    pub(super) endpoints: Arc<Vec<Arc<Endpoint>>>,
    /// The scheduler's view of each endpoint, with its role and group.
    pub(super) cands: Arc<Vec<Candidate>>,
    /// `(prefill, decode)` indices into `endpoints`, in decode rank order.
    pub(super) pairs: Arc<Vec<(usize, usize)>>,
}

/// For a ModelServer with a `pdGroup`, pairs prefill and decode endpoints of the admitted
/// pool; `None` for other servers.
///
/// # Errors
/// [`Error::PdUnavailable`] when no prefill or no decode endpoint is ready, or no decode
/// endpoint has a prefill endpoint of its group.
pub(crate) fn schedule(req: &Request<()>) -> Result<Option<PdScheduled>, Error> {
    let routed = ext::<Routed>(req, "route match")?;
    let Some(layout) = &routed.server.pd else {
        return Ok(None);
    };
    let Parsed { req: parsed, snap } = ext::<Parsed>(req, "parsed request")?;
    let tokens = ext::<Tokens>(req, "token ids")?;
    let (endpoints, cands): (Vec<_>, Vec<_>) = layout
        .members
        .iter()
        .filter_map(|m| {
            let e = routed.pool.iter().find(|e| e.id == m.id)?;
            Some((
                Arc::clone(e),
                e.candidate().with_pd(m.role, m.group.clone()),
            ))
        })
        .unzip();
    let unavailable = |reason: String| Error::PdUnavailable {
        server: routed.server.key.clone(),
        reason,
    };
    for (role, labels) in [(PdRole::Prefill, "prefill"), (PdRole::Decode, "decode")] {
        if !cands
            .iter()
            .any(|c| c.pd.as_ref().is_some_and(|p| p.role == role))
        {
            return Err(unavailable(format!(
                "no ready {labels} endpoint (pods matching pdGroup.{labels}Labels); every request needs one prefill and one decode endpoint of the same group"
            )));
        }
    }
    let prefetched = crate::pipeline::Prefetched::of(req);
    let sreq =
        crate::pipeline::sched_request(&parsed, &tokens, routed.lora.as_deref(), &prefetched);
    let decision = snap
        .scheduler
        .schedule_pd(&sreq, &cands)
        .map_err(|e| match e {
            kthena_sched::Error::NoPdPairs => unavailable(
                "no decode endpoint has a ready prefill endpoint of its group (pdGroup.groupKey)"
                    .into(),
            ),
            e => unavailable(e.to_string()),
        })?;
    Ok(Some(PdScheduled {
        endpoints: Arc::new(endpoints),
        cands: Arc::new(cands),
        pairs: Arc::new(
            decision
                .pairs
                .iter()
                .map(|p| (p.prefill.index, p.decode.index))
                .collect(),
        ),
    }))
}
