//! The pingora proxy: body → prompt → schedule → upstream → report back.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use kthena_openai::{parse_request_at, prompt_member};
use kthena_sched::{
    Candidate, Completion, EndpointId, LoadGuard, LoadTracker, Metrics, Request, Scheduler,
};
use pingora::prelude::{HttpPeer, Result};
use pingora::proxy::{ProxyHttp, Session};
use pingora::{Error, ErrorType::HTTPStatus};
use serde_json::Value;

use crate::{Config, Engine, KvEvents};

/// The gateway: a pingora [`ProxyHttp`] over a static engine list and one [`Scheduler`].
#[derive(Debug)]
pub struct Gateway {
    model: String,
    engines: Vec<Engine>,
    ids: Vec<EndpointId>,
    load: Vec<Arc<LoadTracker>>,
    scheduler: Arc<Scheduler>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// Per-request state: the prompt the scheduler sees, its ranking, the engine in use.
#[derive(Debug, Default)]
pub struct Ctx {
    prompt: String,
    tokens: Option<Vec<u32>>,
    ranked: Vec<usize>,
    tried: usize,
    /// The request on its engine: the owned completion data and the engine's load share.
    sent: Option<(Completion, LoadGuard)>,
}

impl Gateway {
    /// Builds the scheduler from `config.scheduler`.
    ///
    /// # Errors
    /// [`kthena_sched::Error`] when the scheduler section is invalid.
    pub fn new(config: &Config) -> kthena_sched::Result<Self> {
        Ok(Self {
            model: config.model.clone(),
            ids: (config.engines.iter())
                .map(|e| EndpointId::new(e.address.to_string()))
                .collect(),
            load: config.engines.iter().map(|_| Arc::default()).collect(),
            engines: config.engines.clone(),
            scheduler: Arc::new(Scheduler::from_config(&config.scheduler)?),
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// The embedded scheduler.
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// The background service feeding the scheduler's KV index from the engines' KV events
    /// (`None` when no plugin uses a KV index).
    pub fn kv_events(&self) -> Option<KvEvents> {
        let index = Arc::clone(self.scheduler.kv_index()?);
        let sources = (self.ids.iter().zip(&self.engines))
            .filter_map(|(id, e)| Some((id.clone(), e.kv_events.clone()?)))
            .collect();
        Some(KvEvents {
            sources,
            index,
            subscribed: Arc::default(),
        })
    }

    /// Token ids from the first engine whose `/tokenize` answers within 2 s (vLLM's shape:
    /// `prompt`, or `messages` rendered with the engine's own chat template).
    async fn tokenize(&self, body: &serde_json::Map<String, Value>) -> Option<Vec<u32>> {
        let req: serde_json::Map<String, Value> = (["model", "prompt", "messages"].into_iter())
            .filter_map(|k| Some((k.to_owned(), body.get(k)?.clone())))
            .collect();
        for engine in &self.engines {
            let call = async {
                let post = http::Request::post(format!("http://{}/tokenize", engine.address))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(
                        Value::Object(req.clone()).to_string(),
                    )))
                    .ok()?;
                let body = self.client.request(post).await.ok()?.into_body();
                let v: Value =
                    serde_json::from_slice(&body.collect().await.ok()?.to_bytes()).ok()?;
                serde_json::from_value(v.get("tokens")?.clone()).ok()
            };
            if let Ok(Some(tokens)) = tokio::time::timeout(Duration::from_secs(2), call).await {
                return Some(tokens);
            }
        }
        None
    }

    /// The request ended on its engine: settle the load counts and report the outcome.
    fn finish(&self, ctx: &mut Ctx, success: bool) {
        if let Some((done, guard)) = ctx.sent.take() {
            drop(guard);
            self.scheduler.on_completed(&done, success);
        }
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        session.enable_retry_buffering(); // what is read here is replayed to the engine
        let mut body = Vec::new();
        while let Some(chunk) = session.read_request_body().await? {
            body.extend_from_slice(&chunk);
            // pingora 0.9 replays at most 64 KiB read before `upstream_peer` (its retry buffer).
            if body.len() > 64 * 1024 {
                session.respond_error(413).await?;
                return Ok(true);
            }
        }
        // The prompt member of the request's path (`messages`, `prompt`, `input`), as
        // kthena-router reads it; a body it cannot parse is forwarded with no prompt.
        let member = prompt_member(session.req_header().uri.path());
        let Ok(req) = parse_request_at(Bytes::from(body), member) else {
            return Ok(false);
        };
        ctx.prompt = req.prompt_text;
        if self.scheduler.kv_index().is_some() && !ctx.prompt.is_empty() {
            ctx.tokens = self.tokenize(&req.body).await;
        }
        Ok(false)
    }

    async fn upstream_peer(&self, _: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let cands: Vec<Candidate> = (self.ids.iter().zip(&self.load))
            .map(|(id, l)| {
                let mut m = Metrics::default();
                l.fill(&mut m);
                Candidate::new(id.clone(), &self.model).with_metrics(m)
            })
            .collect();
        if ctx.ranked.is_empty() {
            let decision = (self.scheduler.schedule(&ctx.request(&self.model), &cands))
                .map_err(|e| Error::because(HTTPStatus(503), "scheduling", e))?;
            ctx.ranked = decision.ranked.iter().map(|r| r.index).collect();
        }
        let Some(&engine) = ctx.ranked.get(ctx.tried) else {
            return Error::e_explain(HTTPStatus(502), "every engine failed");
        };
        ctx.tried += 1;
        let done = (self.scheduler).on_scheduled(&ctx.request(&self.model), &cands[engine]);
        let guard = self.load[engine].begin(done.prefill_tokens);
        ctx.sent = Some((done, guard));
        let addr = self.engines[engine].address;
        Ok(Box::new(HttpPeer::new(addr, false, String::new())))
    }

    fn fail_to_connect(
        &self,
        _: &mut Session,
        _: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        self.finish(ctx, false);
        e.set_retry(ctx.tried < ctx.ranked.len()); // nothing was sent: take the next fallback
        e
    }

    fn upstream_response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        if let Some((_, guard)) = &mut ctx.sent
            && body.as_ref().is_some_and(|b| !b.is_empty())
        {
            guard.first_byte(); // later calls do nothing
        }
        if end_of_stream {
            // The engine is done, before the client has the whole response.
            let written = session.as_downstream().response_written();
            self.finish(ctx, written.is_some_and(|r| r.status.is_success()));
        }
        Ok(None)
    }

    async fn logging(&self, session: &mut Session, _: Option<&Error>, ctx: &mut Ctx) {
        let written = session.as_downstream().response_written();
        self.finish(ctx, written.is_some_and(|r| r.status.is_success()));
    }
}

impl Ctx {
    /// The scheduler's view of the request.
    fn request<'a>(&'a self, model: &'a str) -> Request<'a> {
        let req = Request::new(model).with_prompt(&self.prompt);
        self.tokens
            .as_deref()
            .map_or(req, |t| req.with_token_ids(t))
    }
}
