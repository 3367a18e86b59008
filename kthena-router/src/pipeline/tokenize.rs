//! Tokenize: the prompt's token ids, when a scheduler plugin needs them (KV-cache-aware
//! routing, prefill estimates). Leaves [`Tokens`].

use std::sync::Arc;

use http::{Request, Response};
use tower::Service;

use super::{Parsed, Routed, Tokens, ext, stage};
use crate::accounting::Accounting;
use crate::body::RespBody;
use crate::error::Error;
use crate::kv::cache::TokenizeFor;
use crate::shared::Shared;

stage!(
    /// Tokenizes the prompt for the scheduler.
    TokenizeLayer,
    Tokenize,
    Request<()>,
    run
);

async fn run<S>(
    shared: Arc<Shared>,
    mut req: Request<()>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<()>, Response = Response<RespBody>, Error = Error>,
{
    let Parsed { req: parsed, snap } = ext::<Parsed>(&req, "parsed request")?;
    let routed = ext::<Routed>(&req, "route match")?;
    let client = crate::serving::client_or(&shared.client);
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
            &parsed.prompt,
            routed.pool.first().map(|e| e.base_url()).as_deref(),
            shared.memory.is_some(),
        )
        .await;
    if let (Some(t), Some(a)) = (&token_ids, req.extensions().get::<Accounting>()) {
        a.tokenized(t.len());
    }
    req.extensions_mut().insert(Tokens(token_ids.map(Arc::new)));
    inner.call(req).await
}
