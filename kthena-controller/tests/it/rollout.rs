//! Rollouts that lose nothing: on the real API server, with the controller, the simulated
//! node (which terminates pods as a kubelet does: NotReady, preStop, the engine drained
//! within the grace period) and the router in cluster mode in front, a steady load of
//! streaming chat completions goes through a `kubectl scale` down, a pod deletion and a
//! rolling update of a ModelServing with zero failed requests: every answer is 200 and a
//! complete SSE stream ending in `data: [DONE]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::ms_support::{Env, WAIT, eventually, json_patch, setup};
use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Pod;
use kthena_api::ModelServing;
use kthena_testenv::TestNamespace;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Concurrent streaming clients.
const STREAMS: usize = 12;
/// Tokens per answer: about 1-2 s of decoding per stream at the simulator's default
/// profile with this many streams.
const MAX_TOKENS: u32 = 200;
/// Steady load before and after each operation.
const STEADY: Duration = Duration::from_secs(5);

/// A ModelServing `llm` of `replicas` one-pod groups, its engines on `port`, 30 s of
/// termination grace; a ModelServer and a ModelRoute (model `m-<namespace>`) in front; the
/// router in cluster mode.
struct Rollout {
    env: Env,
    router: kthena_router::Router,
    model: String,
}

impl Rollout {
    async fn start(prefix: &str, replicas: i32) -> Result<Self> {
        let env = setup(prefix).await?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let ns = &env.ns;
        let ms: ModelServing = serde_json::from_value(serving(ns.name(), replicas, port))?;
        ns.api::<ModelServing>()
            .create(&PostParams::default(), &ms)
            .await?;
        let model = format!("m-{}", ns.name());
        create_route(ns, port, &model).await?;
        let text = "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\n\
                    metricsScrapeInterval: 200ms\naccessLog: {enabled: false}\n";
        let path = std::path::Path::new("router.yaml");
        let cfg = kthena_router::Config::from_yaml(path, text)?.validate(path)?;
        let router = kthena_router::Router::start_in_cluster(cfg, ns.client().clone()).await?;
        let r = Self { env, router, model };
        r.wait_endpoints(usize::try_from(replicas)?).await?;
        Ok(r)
    }

    fn ns(&self) -> &TestNamespace {
        &self.env.ns
    }

    /// Names of the router's endpoints of the ModelServer.
    fn endpoints(&self) -> Vec<String> {
        let snap = self.router.snapshot();
        let mut v: Vec<String> = snap
            .servers
            .get(&format!("{}/llm", self.ns().name()))
            .map(|s| s.endpoints.iter().map(|e| e.name.clone()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Waits until the ModelServing has exactly `n` pods, all Running and Ready (none
    /// terminating), and the router has exactly those as endpoints; their names.
    async fn wait_endpoints(&self, n: usize) -> Result<Vec<String>> {
        eventually(&format!("{n} ready pods routed"), || async {
            let pods = self.pods().await?;
            let ready: Vec<String> = pods
                .iter()
                .filter(|p| {
                    kthena_controller::serving::running_and_ready(p)
                        && p.metadata.deletion_timestamp.is_none()
                })
                .map(ResourceExt::name_any)
                .collect();
            let done = pods.len() == n && ready.len() == n && self.endpoints() == ready;
            Ok(done.then_some(ready))
        })
        .await
    }

    async fn pods(&self) -> Result<Vec<Pod>> {
        let lp = ListParams::default().labels("modelserving.volcano.sh/name=llm");
        let mut pods = self.ns().api::<Pod>().list(&lp).await?.items;
        pods.sort_by_key(ResourceExt::name_any);
        Ok(pods)
    }
}

/// The ModelServing: one role of one entry pod per group, the simulated engine serving `m`.
fn serving(ns: &str, replicas: i32, port: u16) -> serde_json::Value {
    json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "llm", "namespace": ns},
        "spec": {
            "replicas": replicas,
            "template": {"roles": [{
                "name": "server",
                "replicas": 1,
                "entryTemplate": {"spec": {
                    // Scheduled, as every running pod of a real cluster: the API server
                    // deletes a pod without a nodeName at once, with no grace period.
                    "nodeName": "sim",
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "engine", "image": "vllm/vllm-openai",
                        "args": ["--model", "m", "--port", port.to_string()],
                        "ports": [{"containerPort": port}],
                        "readinessProbe": {"httpGet": {"path": "/health", "port": port}},
                    }],
                }},
                "workerReplicas": 0,
            }]},
        },
    })
}

async fn create_route(ns: &TestNamespace, port: u16, model: &str) -> Result<()> {
    let server: kthena_api::ModelServer = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": "llm", "namespace": ns.name()},
        "spec": {
            "model": "m", "inferenceEngine": "vLLM",
            "workloadSelector": {"matchLabels": {"modelserving.volcano.sh/name": "llm"}},
            "workloadPort": {"port": port},
        },
    }))?;
    ns.api::<kthena_api::ModelServer>()
        .create(&PostParams::default(), &server)
        .await?;
    let route: kthena_api::ModelRoute = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": "llm", "namespace": ns.name()},
        "spec": {"modelName": model,
                 "rules": [{"name": "default", "targetModels": [{"modelServerName": "llm"}]}]},
    }))?;
    ns.api::<kthena_api::ModelRoute>()
        .create(&PostParams::default(), &route)
        .await?;
    Ok(())
}

/// [`STREAMS`] clients, each sending streaming chat completions through the router one
/// after the other until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    clients: JoinSet<Vec<String>>,
}

/// What the load saw.
struct Tally {
    sent: usize,
    failures: Vec<String>,
}

impl Load {
    fn start(router: std::net::SocketAddr, model: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let mut clients = JoinSet::new();
        for c in 0..STREAMS {
            let (stop, sent, http) = (Arc::clone(&stop), Arc::clone(&sent), http.clone());
            let url = format!("http://{router}/v1/chat/completions");
            let model = model.to_owned();
            clients.spawn(async move {
                let mut failures = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    let body = json!({"model": model, "stream": true, "max_tokens": MAX_TOKENS,
                        "messages": [{"role": "user", "content": format!("client {c} request {i}")}]});
                    sent.fetch_add(1, Ordering::SeqCst);
                    if let Err(e) = stream_once(&http, &url, &body).await {
                        failures.push(format!("client {c} request {i}: {e:#}"));
                    }
                    i += 1;
                }
                failures
            });
        }
        Self {
            stop,
            sent,
            clients,
        }
    }

    async fn stop(mut self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let mut failures = Vec::new();
        while let Some(f) = self.clients.join_next().await {
            failures.extend(f.unwrap_or_else(|e| vec![format!("client task: {e}")]));
        }
        Tally {
            sent: self.sent.load(Ordering::SeqCst),
            failures,
        }
    }
}

/// One streaming request: Ok when the answer is 200 and a complete SSE stream that ends in
/// `data: [DONE]` with no error event.
async fn stream_once(
    http: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    body: &serde_json::Value,
) -> Result<()> {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    let resp = tokio::time::timeout(Duration::from_secs(30), http.request(req))
        .await
        .context("no answer within 30 s")??;
    let status = resp.status();
    let bytes = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
        .await
        .context("the stream did not end within 30 s")?
        .context("the stream broke")?
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    if status != 200 {
        bail!("status {status}: {text}");
    }
    if !text.ends_with("data: [DONE]\n\n") {
        bail!("no final [DONE]: {text}");
    }
    if text.contains("\"error\"") {
        bail!("an error event: {text}");
    }
    let tokens = text.matches("\"delta\"").count();
    if tokens < usize::try_from(MAX_TOKENS)? {
        bail!("{tokens} delta events for {MAX_TOKENS} tokens: {text}");
    }
    Ok(())
}

/// Runs `operation` under steady load ([`STEADY`] before and after), then asserts that no
/// request failed; returns the load's request count and how long the operation took.
async fn under_load<F, Fut>(r: &Rollout, what: &str, operation: F) -> Result<(usize, Duration)>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let load = Load::start(r.router.addr, &r.model);
    tokio::time::sleep(STEADY).await;
    let t0 = Instant::now();
    let done = operation().await;
    let took = t0.elapsed();
    tokio::time::sleep(STEADY).await;
    let tally = load.stop().await;
    done?;
    eprintln!(
        "{what}: {} requests, {} failed, operation took {took:?}",
        tally.sent,
        tally.failures.len()
    );
    assert!(
        tally.failures.is_empty(),
        "{what}: {} of {} requests failed:\n{}",
        tally.failures.len(),
        tally.sent,
        tally.failures.join("\n")
    );
    assert!(tally.sent >= STREAMS * 4, "only {} requests", tally.sent);
    Ok((tally.sent, took))
}

/// `kubectl scale modelserving llm --replicas=1` from 3: two pods terminate with streams in
/// flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_down_under_streaming_load_fails_no_request() -> Result<()> {
    let r = Rollout::start("rollout-scale", 3).await?;
    under_load(&r, "scale 3 -> 1", || async {
        let out = r
            .ns()
            .kubectl()
            .args(["scale", "modelserving", "llm", "--replicas=1"])
            .output()?;
        if !out.status.success() {
            bail!("kubectl scale: {}", String::from_utf8_lossy(&out.stderr));
        }
        r.wait_endpoints(1).await?;
        Ok(())
    })
    .await?;
    r.router.shutdown().await;
    Ok(())
}

/// A pod of two is deleted (default grace, the template's 30 s): its streams finish, the
/// controller replaces it, and the load never notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deletion_under_streaming_load_fails_no_request() -> Result<()> {
    let r = Rollout::start("rollout-delete", 2).await?;
    let before = r.wait_endpoints(2).await?;
    let victim = r
        .ns()
        .api::<Pod>()
        .get(&before[0])
        .await?
        .metadata
        .uid
        .context("uid")?;
    under_load(&r, "pod deletion", || async {
        let t0 = Instant::now();
        r.ns()
            .api::<Pod>()
            .delete(&before[0], &DeleteParams::default())
            .await?;
        eventually("the deleted pod out of the router's endpoints", || async {
            Ok((!r.endpoints().contains(&before[0])).then_some(()))
        })
        .await?;
        eprintln!(
            "the deleted pod left the router's endpoints after {:?}",
            t0.elapsed()
        );
        eventually("the deleted pod replaced", || async {
            let pods = r.pods().await?;
            Ok((!pods
                .iter()
                .any(|p| p.metadata.uid.as_ref() == Some(&victim)))
            .then_some(()))
        })
        .await?;
        r.wait_endpoints(2).await?;
        Ok(())
    })
    .await?;
    r.router.shutdown().await;
    Ok(())
}

/// A template change of a ModelServing of 2 groups (maxUnavailable 1): each old pod
/// terminates with streams in flight while the other serves, and is replaced by a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_under_streaming_load_fails_no_request() -> Result<()> {
    let r = Rollout::start("rollout-update", 2).await?;
    let old = r.pods().await?;
    under_load(&r, "rolling update", || async {
        json_patch(
            r.ns(),
            "llm",
            json!([{"op": "add",
                    "path": "/spec/template/roles/0/entryTemplate/spec/containers/0/env",
                    "value": [{"name": "ROLLOUT", "value": "2"}]}]),
        )
        .await?;
        eventually("every pod replaced", || async {
            let pods = r.pods().await?;
            let replaced = pods
                .iter()
                .all(|p| !old.iter().any(|o| o.metadata.uid == p.metadata.uid));
            Ok((replaced && pods.len() == 2).then_some(()))
        })
        .await?;
        r.wait_endpoints(2).await?;
        Ok(())
    })
    .await?;
    let ms = r.ns().api::<ModelServing>().get("llm").await?;
    let st = ms.status.unwrap_or_default();
    assert_eq!(
        (st.updated_replicas, st.available_replicas),
        (Some(2), Some(2))
    );
    assert!(WAIT > STEADY);
    r.router.shutdown().await;
    Ok(())
}
