//! The request path to an external provider: checks, URL, allow-listed headers, body
//! (`model` from `spec.model`; OpenAI streams get `stream_options.include_usage`), one
//! HTTPS call without retries (a multipart upload's unread rest streams after its
//! prefix), and the answer streamed back through the router's
//! [`ProxyBody`](crate::upstream::body::ProxyBody) (usage read for the access log and metrics,
//! an injected usage chunk hidden, non-2xx answers passed through).

use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use kthena_api::networking::ProviderType;

use super::{ALLOWED_HEADERS, ANTHROPIC_HEADERS, Provider};
use crate::body::RespBody;
use crate::error::Error;
use crate::error::error_chain;
use crate::pipeline::Ctx;
use crate::shared::Shared;
use crate::upstream::{self, Dest, ReqBody, SendError, stream_response};

/// Sends the request to `provider` and streams its answer.
///
/// # Errors
/// [`Error::ProviderPath`] for a path the provider type does not serve,
/// [`Error::ProviderNotReady`] when its credential or configuration is unusable,
/// [`Error::ProviderTransport`] when the call fails before an answer.
pub(crate) async fn forward(
    shared: Arc<Shared>,
    req: Request<Ctx<()>>,
    provider: Arc<Provider>,
) -> Result<Response<RespBody>, Error> {
    let ctx = req.body();
    let (parsed, acct, request_id) = (&ctx.parsed, &ctx.meta.acct, &ctx.meta.id);
    let path = req.uri().path();
    if !provider.serves(path) {
        return Err(Error::ProviderPath {
            provider_type: match provider.kind {
                ProviderType::OpenAI => "OpenAI",
                ProviderType::Anthropic => "Anthropic",
            },
            path: path.to_owned(),
        });
    }
    let credential = provider
        .credential
        .clone()
        .map_err(|reason| Error::ProviderNotReady {
            provider: provider.key.clone(),
            reason,
        })?;
    let inject = provider.kind == ProviderType::OpenAI && path != "/v1/responses";
    let body = if inject {
        parsed.req.upstream_body(provider.model.as_deref())
    } else {
        parsed
            .req
            .upstream_responses_body(provider.model.as_deref())
    };
    let path_and_query = req.uri().path_and_query().map_or(path, |p| p.as_str());
    let url = provider.upstream_url(path_and_query);
    let headers = headers(&provider, req.headers(), &request_id.0, credential);
    acct.upstream_begin();
    acct.attempt(&provider.key, 1);
    let dest = Dest::External {
        url: &url,
        insecure: provider.insecure_skip_verify,
    };
    let tail = ctx.tail.clone();
    let up_body = ReqBody::new(body.bytes.clone(), tail.clone());
    let sent = upstream::send(&shared, dest, &headers, up_body).await;
    let resp = sent.map_err(|e| {
        acct.upstream_end();
        if let Some(client) = tail.as_ref().and_then(|t| t.failure()) {
            // A streamed upload's client body failed (too large, too slow, gone).
            return client;
        }
        let provider = provider.key.clone();
        match e {
            SendError::Tls(e) => Error::ProviderNotReady {
                provider,
                reason: format!("TLS client: {e}"),
            },
            SendError::Request(e) => Error::ProviderNotReady {
                provider,
                reason: format!("upstream request {url}: {e}"),
            },
            e => Error::ProviderTransport {
                provider,
                reason: error_chain(&e),
            },
        }
    })?;
    acct.upstream_status(resp.status().as_u16());
    acct.upstream_end();
    Ok(stream_response(
        resp,
        acct.clone(),
        &parsed.req,
        body.injected_usage,
        &shared,
    ))
}

/// The allow-listed client headers, then `spec.headers`, then the credential; JSON by
/// default.
fn headers(
    provider: &Provider,
    client: &HeaderMap,
    request_id: &str,
    credential: Option<(HeaderName, HeaderValue)>,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    let anthropic = provider.kind == ProviderType::Anthropic;
    for (name, value) in client {
        let n = name.as_str();
        if ALLOWED_HEADERS.contains(&n) || (anthropic && ANTHROPIC_HEADERS.contains(&n)) {
            h.append(name.clone(), value.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(HeaderName::from_static("x-request-id"), v);
    }
    for (n, v) in &provider.headers {
        h.insert(n.clone(), v.clone());
    }
    if !h.contains_key(header::CONTENT_TYPE) {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some((n, v)) = credential {
        h.insert(n, v);
    }
    h
}
