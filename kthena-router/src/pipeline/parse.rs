//! Parse: the inference paths and method, the bounded body read ([`read_body`]: size, read
//! timeouts, the shared body budget) and the OpenAI body parse (JSON by the path's
//! [`Api`], or a multipart form's `model` field, read up to that field only:
//! [`read_form`]). Passes on a [`Ctx`] with [`Parsed`] (body, or a form's prefix, and
//! routing snapshot), the body's budget reservation ([`HeldBody`]) and a form's unread
//! rest ([`Ctx::tail`]) in place of the body.

use std::sync::Arc;

use bytes::Bytes;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use http_body::Body;
use kthena_openai::{Api, ParsedRequest, parse_request_for};
use tower::{Layer, Service};

use super::BoxFut;
use super::ctx::{Ctx, Inbound, Parsed};
use crate::body::read::{ReadBody, ReadLimits, read_body, read_form};
use crate::body::{BoxError, HeldBody, Reservation, RespBody, form, parse_cost};
use crate::error::Error;
use crate::shared::Shared;

/// Reads and parses the body of the inference paths (every `POST /v1/*` but `/v1/models`):
/// a JSON body by its path's API, a `multipart/form-data` body for its `model` field.
#[derive(Debug, Clone)]
pub(crate) struct ParseLayer {
    shared: Arc<Shared>,
}

impl ParseLayer {
    /// The layer over the router's shared state.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;
    fn layer(&self, inner: S) -> Parse<S> {
        Parse {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of [`ParseLayer`], generic over the client body `B` (hyper's `Incoming`).
#[derive(Debug, Clone)]
pub(crate) struct Parse<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, B> Service<Request<Inbound<B>>> for Parse<S>
where
    S: Service<Request<Ctx<()>>, Response = Response<RespBody>, Error = Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<RespBody>;
    type Error = Error;
    type Future = BoxFut;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Inbound<B>>) -> BoxFut {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(run(Arc::clone(&self.shared), req, inner))
    }
}

async fn run<S, B>(
    shared: Arc<Shared>,
    req: Request<Inbound<B>>,
    mut inner: S,
) -> Result<Response<RespBody>, Error>
where
    S: Service<Request<Ctx<()>>, Response = Response<RespBody>, Error = Error>,
    B: Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    // An HTTPRoute's rewrite decides the path the body is parsed as.
    let path = req
        .extensions()
        .get::<crate::gateway::EffectivePath>()
        .map_or(req.uri().path(), |p| p.0.as_str());
    let Some(api) = inference_api(path) else {
        return Err(Error::UnknownPath {
            path: path.to_owned(),
        });
    };
    if req.method() != Method::POST {
        return Err(Error::MethodNotAllowed {
            method: req.method().to_string(),
            path: path.to_owned(),
        });
    }
    let boundary = form::boundary(req.headers());
    let lim = ReadLimits {
        max_bytes: shared.max_body_bytes,
        idle_timeout: shared.listener.body_read_idle_timeout,
        total_timeout: shared.listener.body_read_timeout,
        budget: &shared.body_budget,
    };
    let (parts, Inbound { body, meta }) = req.into_parts();
    let req = Request::from_parts(parts, body);
    let (parts, parsed, held, tail) = match boundary {
        Some(b) => {
            let f = read_form(req, lim, &b).await?;
            let parsed = ParsedRequest::form(f.prefix, f.model);
            (f.parts, parsed, f.held, f.tail)
        }
        None => {
            let ReadBody {
                parts,
                bytes,
                mut held,
            } = read_body(req, lim).await?;
            let parsed = parse_json(&shared, bytes, api, &mut held)?;
            (parts, parsed, held, None)
        }
    };
    let held = HeldBody(Arc::new(held));
    let snap = shared.snapshot.load_full();
    meta.acct.parsed(&parsed, snap.routes.knows(&parsed.model));
    let parsed = Parsed {
        req: Arc::new(parsed),
        snap,
    };
    let ctx = Ctx {
        meta,
        parsed,
        held,
        tail,
        at: (),
    };
    inner.call(Request::from_parts(parts, ctx)).await
}

/// Parses a JSON body of API `api`, its parsed tree's cost reserved on the body budget
/// first.
fn parse_json(
    shared: &Shared,
    bytes: Bytes,
    api: Api,
    held: &mut Reservation,
) -> Result<ParsedRequest, Error> {
    // The parsed tree of a large body can cost many times its bytes: reserve that too.
    let cost = parse_cost(&bytes);
    if cost > 0 && !shared.body_budget.grow(held, cost) {
        return Err(Error::BodyBudgetExhausted {
            budget: shared.body_budget.limit(),
        });
    }
    Ok(parse_request_for(bytes, api)?)
}

/// The API of an inference path ([`Api::of_path`]: every `/v1/*` path but `/v1/models`),
/// `None` for any other path: the one place the router decides which paths it parses and
/// where their model and prompt are.
pub(crate) fn inference_api(path: &str) -> Option<Api> {
    Api::of_path(path)
}

/// Whether `path` is an inference path this stage parses ([`inference_api`]).
pub(crate) fn is_inference_path(path: &str) -> bool {
    inference_api(path).is_some()
}

#[cfg(test)]
mod tests;
