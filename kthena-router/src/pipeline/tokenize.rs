//! Tokenize: the prompt's token ids, when a scheduler plugin needs them (KV-cache-aware
//! routing, prefill estimates). Passes on [`Tokenized`].

use std::sync::Arc;

use http::{Request, Response};
use tower::Service;

use super::ctx::{Ctx, Parsed, Routed, Tokenized, Tokens};
use super::stage;
use crate::body::RespBody;
use crate::error::Error;
use crate::kv::cache::TokenizeFor;
use crate::shared::Shared;

stage!(
    /// Tokenizes the prompt for the scheduler.
    TokenizeLayer,
    Tokenize,
    Request<Ctx<Routed>> => Request<Ctx<Tokenized>>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    req: Request<Ctx<Routed>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<Tokenized>>, Response = Response<RespBody>, Error = Error>,
{
    let ctx = req.body();
    let Parsed { req: parsed, snap } = &ctx.parsed;
    let routed = &ctx.at;
    let client = crate::server::serving::client_or(&shared.client);
    let token_ids = snap
        .kv
        .request_tokens(
            &client,
            &shared.metrics,
            TokenizeFor {
                engine: routed.server.engine.as_str(),
                model: &parsed.model,
                upstream_model: &routed.upstream_model,
            },
            parsed,
            routed.pool.first().map(|e| e.base_url()).as_deref(),
            shared.memory.is_some(),
        )
        .await;
    if let Some(t) = &token_ids {
        ctx.meta.acct.tokenized(t.len());
    }
    let tokens = Tokens(token_ids.map(Arc::new));
    let req = req.map(|c| Ctx {
        meta: c.meta,
        parsed: c.parsed,
        held: c.held,
        tail: c.tail,
        at: Tokenized {
            routed: c.at,
            tokens,
        },
    });
    inner.call(req).await
}
