//! Schedule: `kthena-sched` ranks the admitted endpoints. Leaves [`Scheduled`].

use std::sync::Arc;

use http::{Request, Response};
use kthena_openai::ParsedRequest;
use kthena_sched::{Candidate, Request as SchedRequest};
use tower::Service;

use super::{Parsed, Prefetched, Routed, Scheduled, Tokens, ext, stage};
use crate::body::RespBody;
use crate::error::Error;
use crate::shared::Shared;

stage!(
    /// Ranks the candidate endpoints.
    ScheduleLayer,
    Schedule,
    Request<()>,
    run
);

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

async fn run<S>(
    shared: Arc<Shared>,
    mut req: Request<()>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<()>, Response = Response<RespBody>, Error = Error>,
{
    if let Some(s) = shared.in_flight_share.get()
        && let Some(p) = req.extensions().get::<Parsed>()
    {
        s.sync(&p.snap.endpoints).await;
    }
    let prefetched = prefetch(&shared, &req).await?;
    req.extensions_mut().insert(prefetched);
    if let Some(pd) = crate::pd::pairs::schedule(&req)? {
        // A `pdGroup` server: prefill/decode pairs instead of one ranking.
        req.extensions_mut().insert(pd);
    } else {
        let scheduled = schedule(&shared, &req)?;
        req.extensions_mut().insert(scheduled);
    }
    inner.call(req).await
}

/// Answers the KV-index lookups of a remote index (Redis) on the blocking pool (inline on the
/// in-memory network, `Shared::blocking`), so that scheduling itself never waits on I/O
/// ([`kthena_sched::Scheduler::prepare`]).
async fn prefetch(shared: &Shared, req: &Request<()>) -> Result<Prefetched, Error> {
    let Parsed { req: parsed, snap } = ext::<Parsed>(req, "parsed request")?;
    let routed = ext::<Routed>(req, "route match")?;
    let tokens = ext::<Tokens>(req, "token ids")?;
    let none = Prefetched::default();
    let sreq = sched_request(&parsed, &tokens, routed.lora.as_deref(), &none);
    let (Some(mut p), Some(index)) = (snap.scheduler.prepare(&sreq), snap.scheduler.kv_index())
    else {
        return Ok(none);
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
    Ok(Prefetched(answered.map(Arc::new)))
}

fn schedule(shared: &Shared, req: &Request<()>) -> Result<Scheduled, Error> {
    let Parsed { req: parsed, snap } = ext::<Parsed>(req, "parsed request")?;
    let routed = ext::<Routed>(req, "route match")?;
    let tokens = ext::<Tokens>(req, "token ids")?;
    let prefetched = Prefetched::of(req);
    let cands: Vec<Candidate> = routed.pool.iter().map(|e| e.candidate()).collect();
    let sreq = sched_request(&parsed, &tokens, routed.lora.as_deref(), &prefetched);
    let decision = snap
        .scheduler
        .schedule(&sreq, &cands)
        .map_err(|e| Error::Scheduling {
            server: routed.server.key.clone(),
            reason: e.to_string(),
        })?;
    let model: crate::metrics::LabelValue = Arc::from(parsed.model.as_str());
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
mod tests {
    use tower::{Layer, ServiceExt};

    use super::*;
    use crate::pipeline::test_util;

    #[tokio::test]
    async fn ranks_every_admitted_endpoint() {
        let (shared, _) = test_util::shared(&["127.0.0.1:1", "127.0.0.1:2"]);
        let (seen, inner) = test_util::recorder();
        let mut req = test_util::routed(&shared, test_util::accounting(&shared)).await;
        req.extensions_mut().insert(Tokens(None));
        ScheduleLayer::new(Arc::clone(&shared))
            .layer(inner)
            .oneshot(req)
            .await
            .unwrap();
        let seen = seen.lock().unwrap().take().unwrap();
        assert!(seen.tokens.is_some_and(|t| t.0.is_none()));
        let s = seen.scheduled.unwrap();
        assert_eq!(s.cands.len(), 2);
        let mut ranked = s.ranked.to_vec();
        ranked.sort_unstable();
        assert_eq!(ranked, [0, 1]);
    }
}
