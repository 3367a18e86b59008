//! A recording pass-through proxy ("tap") in front of a kthena-sim engine, so that a test
//! sees exactly what the router sent each engine and what the engine answered.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

type TapBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// One inference request (`POST /v1/...`) the engine behind a tap got.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Request body, as sent by the router.
    pub body: Bytes,
    /// The whole answer body (non-streaming answers only).
    pub answer: Option<Bytes>,
    /// For a gated tap: whether the gate opened (the other tap's request arrived) before
    /// this request was passed on.
    pub gate_opened: Option<bool>,
}

/// A recording proxy in front of one engine.
pub(crate) struct Tap {
    /// Where the tap listens (the address the router is configured with).
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    posts: watch::Sender<usize>,
    tasks: TaskTracker,
}

impl Tap {
    /// Listens on `bind` and passes everything on to `target`. With `gate`, each inference
    /// request waits (up to 5 s) until the gate tap has seen at least as many inference
    /// requests as this one, then goes on.
    pub(crate) async fn start(bind: SocketAddr, target: SocketAddr, gate: Option<&Self>) -> Self {
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (posts, _) = watch::channel(0usize);
        let gate = gate.map(|g| g.posts.subscribe());
        let tasks = TaskTracker::new();
        let ctx = Arc::new(Ctx {
            target,
            seen: Arc::clone(&seen),
            posts: posts.clone(),
            gate,
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
        });
        let t2 = tasks.clone();
        tasks.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let ctx = Arc::clone(&ctx);
                t2.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let ctx = Arc::clone(&ctx);
                        async move { Ok::<_, Infallible>(ctx.pass(req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            seen,
            posts,
            tasks,
        }
    }

    /// The inference requests seen so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.tasks.close();
    }
}

struct Ctx {
    target: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    posts: watch::Sender<usize>,
    gate: Option<watch::Receiver<usize>>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Ctx {
    async fn pass(&self, req: Request<Incoming>) -> Response<TapBody> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let path = parts.uri.path().to_owned();
        let inference = parts.method == http::Method::POST && path.starts_with("/v1/");
        let mut index = None;
        let mut gate_opened = None;
        if inference {
            let n = {
                let mut s = self.seen.lock().unwrap();
                s.push(Seen {
                    body: body.clone(),
                    answer: None,
                    gate_opened: None,
                });
                s.len()
            };
            self.posts.send_replace(n);
            index = Some(n - 1);
            if let Some(g) = &self.gate {
                let mut g = g.clone();
                let opened = tokio::time::timeout(Duration::from_secs(5), g.wait_for(|v| *v >= n));
                gate_opened = Some(matches!(opened.await, Ok(Ok(_))));
            }
        }
        let uri = format!(
            "http://{}{}",
            self.target,
            parts.uri.path_and_query().unwrap().as_str()
        );
        let mut up = Request::builder().method(parts.method).uri(uri);
        for (k, v) in &parts.headers {
            if k != http::header::HOST {
                up = up.header(k, v);
            }
        }
        let resp = match self.client.request(up.body(Full::new(body)).unwrap()).await {
            Ok(r) => r,
            Err(e) => {
                let mut r = Response::new(
                    Full::new(Bytes::from(e.to_string()))
                        .map_err(|n| match n {})
                        .boxed(),
                );
                *r.status_mut() = http::StatusCode::BAD_GATEWAY;
                return r;
            }
        };
        let sse = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        let (rparts, rbody) = resp.into_parts();
        if let Some(i) = index {
            self.seen.lock().unwrap()[i].gate_opened = gate_opened;
        }
        if sse || !inference {
            return Response::from_parts(rparts, rbody.map_err(Into::into).boxed());
        }
        let bytes = rbody.collect().await.unwrap().to_bytes();
        if let Some(i) = index {
            self.seen.lock().unwrap()[i].answer = Some(bytes.clone());
        }
        Response::from_parts(rparts, Full::new(bytes).map_err(|n| match n {}).boxed())
    }
}

/// The raw text of the top-level `kv_transfer_params` of a JSON object (exact bytes).
pub(crate) fn raw_kv_params(json: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct K<'a> {
        #[serde(borrow)]
        kv_transfer_params: &'a serde_json::value::RawValue,
    }
    let k: K<'_> = serde_json::from_slice(json).unwrap();
    k.kv_transfer_params.get().to_owned()
}
