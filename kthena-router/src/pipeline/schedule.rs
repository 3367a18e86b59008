//! Schedule: `kthena-sched` ranks the admitted endpoints (or, for a `pdGroup` ModelServer,
//! pairs prefill and decode endpoints, `pd::pairs`). Passes on [`Decided`].

use std::sync::Arc;

use http::{Request, Response};
use kthena_sched::Candidate;
use tower::Service;

use super::ctx::{Ctx, Decided, Decision, Parsed, Prefetched, Scheduled, Tokenized, sched_request};
use super::stage;
use crate::body::RespBody;
use crate::error::Error;
use crate::shared::Shared;

stage!(
    /// Ranks the candidate endpoints.
    ScheduleLayer,
    Schedule,
    Request<Ctx<Tokenized>> => Request<Ctx<Decided>>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    req: Request<Ctx<Tokenized>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Decided>>, Response = Response<RespBody>, Error = Error>,
{
    let ctx = req.body();
    if let Some(s) = shared.in_flight_share.get() {
        s.sync(&ctx.parsed.snap.endpoints, &ctx.parsed.snap.kv)
            .await;
    }
    let prefetched = prefetch(&shared, &ctx.parsed, &ctx.at).await;
    let decision = match crate::pd::pairs::schedule(&ctx.parsed, &ctx.at, &prefetched)? {
        // A `pdGroup` server: prefill/decode pairs instead of one ranking.
        Some(pd) => Decision::Pd(pd),
        None => Decision::Ranked(schedule(&shared, &ctx.parsed, &ctx.at, &prefetched)?),
    };
    let req = req.map(|c| Ctx {
        meta: c.meta,
        parsed: c.parsed,
        held: c.held,
        tail: c.tail,
        at: Decided {
            routed: c.at.routed,
            tokens: c.at.tokens,
            prefetched,
            decision,
        },
    });
    inner.call(req).await
}

/// Answers the KV-index lookups of a remote index (Redis) on the blocking pool (inline on the
/// in-memory network, `Shared::blocking`), so that scheduling itself never waits on I/O
/// ([`kthena_sched::Scheduler::prepare`]).
async fn prefetch(shared: &Shared, parsed: &Parsed, at: &Tokenized) -> Prefetched {
    let Parsed { req: parsed, snap } = parsed;
    let routed = &at.routed;
    let none = Prefetched::default();
    let sreq = sched_request(parsed, &at.tokens, routed.lora.as_deref(), &none);
    let (Some(mut p), Some(index)) = (snap.scheduler.prepare(&sreq), snap.scheduler.kv_index())
    else {
        return none;
    };
    let index = Arc::clone(index);
    let cands: Vec<Candidate> = routed.pool.iter().map(|e| e.candidate()).collect();
    let answered = shared
        .blocking(move || {
            let refs: Vec<&Candidate> = cands.iter().collect();
            p.answer_from(index.as_ref(), &refs);
            p
        })
        .await;
    // A lookup task that panicked: schedule without the prefetch (plugins ask the index).
    Prefetched(answered.map(Arc::new))
}

fn schedule(
    shared: &Shared,
    parsed: &Parsed,
    at: &Tokenized,
    prefetched: &Prefetched,
) -> Result<Scheduled, Error> {
    let Parsed { req: parsed, snap } = parsed;
    let routed = &at.routed;
    let cands: Vec<Candidate> = routed.pool.iter().map(|e| e.candidate()).collect();
    let sreq = sched_request(parsed, &at.tokens, routed.lora.as_deref(), prefetched);
    let decision = snap
        .scheduler
        .schedule(&sreq, &cands)
        .map_err(|e| Error::Scheduling {
            server: routed.server.key.clone(),
            reason: e.to_string(),
        })?;
    let model: crate::telemetry::metrics::LabelValue = Arc::from(parsed.model.as_str());
    let metrics = &shared.metrics;
    metrics
        .plugins
        .plugin_timings(&model, &decision.plugin_timings);
    for (plugin, ratio) in &decision.match_ratios {
        metrics.match_ratio(plugin, &model, *ratio);
    }
    Ok(Scheduled {
        cands: Arc::new(cands),
        ranked: Arc::new(decision.ranked.iter().map(|r| r.index).collect()),
    })
}

#[cfg(test)]
mod tests;
