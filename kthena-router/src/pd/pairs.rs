//! Pairing: the prefill/decode pairs of one request, from `kthena-sched`'s
//! `Scheduler::schedule_pd` over the admitted endpoints of a `pdGroup` ModelServer.

use std::sync::Arc;

use kthena_sched::PdRole;

use crate::error::Error;
use crate::pipeline::ctx::{Parsed, PdScheduled, Prefetched, Tokenized, sched_request};

/// For a ModelServer with a `pdGroup`, pairs prefill and decode endpoints of the admitted
/// pool; `None` for other servers.
///
/// # Errors
/// [`Error::PdUnavailable`] when no prefill or no decode endpoint is ready, or no decode
/// endpoint has a prefill endpoint of its group.
pub(crate) fn schedule(
    parsed: &Parsed,
    at: &Tokenized,
    prefetched: &Prefetched,
) -> Result<Option<PdScheduled>, Error> {
    let routed = &at.routed;
    let Some(layout) = &routed.server.pd else {
        return Ok(None);
    };
    let Parsed { req: parsed, snap } = parsed;
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
    let sreq = sched_request(parsed, &at.tokens, routed.lora.as_deref(), prefetched);
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
