//! Helpers of the cluster-mode tests: a router in cluster mode on the test control plane,
//! manifests, and Pods made real by kthena-sim engines on their own loopback addresses.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kthena_api::{ModelRoute, ModelServer};
use kthena_router::Router;
use kthena_sim::node::{NodeConfig, READY_ANNOTATION, SimNode};
use kthena_testenv::TestNamespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

use crate::common::{chat, get, post};

/// A router in cluster mode on the test control plane, all ports ephemeral, JSON access
/// log in a temporary folder, least-request scheduling (ties take turns, so sequential
/// requests alternate between equal endpoints), 100 ms scrapes.
pub(crate) struct ClusterRouter {
    pub dir: tempfile::TempDir,
    pub router: Router,
}

impl ClusterRouter {
    pub(crate) async fn start(ns: &TestNamespace) -> Self {
        Self::start_with(ns, "metricsScrapeInterval: 100ms").await
    }

    /// As [`ClusterRouter::start`] with `extra` config lines.
    pub(crate) async fn start_with(ns: &TestNamespace, extra: &str) -> Self {
        Self::start_inner(ns.client().clone(), extra).await
    }

    /// As [`ClusterRouter::start`] on another client (another identity).
    pub(crate) async fn start_as(_ns: &TestNamespace, client: kube::Client) -> Self {
        Self::start_inner(client, "metricsScrapeInterval: 100ms").await
    }

    async fn start_inner(client: kube::Client, extra: &str) -> Self {
        Self::start_raw(
            client,
            &format!(
                "{extra}\nscheduler:\n  plugins:\n    Filter: {{enabled: []}}\n    Score:\n      enabled:\n      - {{name: least-request, weight: 1}}\n"
            ),
        )
        .await
    }

    /// A router in cluster mode with `body` as its configuration (scheduler included),
    /// besides the ephemeral ports and the JSON access log.
    pub(crate) async fn start_raw(client: kube::Client, body: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let text = format!(
            "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\n\
             accessLog: {{format: json, output: \"{}\"}}\n{body}\n",
            log.display()
        );
        let path = dir.path().join("router.yaml");
        std::fs::write(&path, &text).unwrap();
        let cfg = kthena_router::Config::from_yaml(&path, &text)
            .unwrap()
            .validate(&path)
            .unwrap();
        assert!(cfg.is_cluster_mode());
        let router = Router::start_in_cluster(cfg, client).await.unwrap();
        Self { dir, router }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.router.addr)
    }

    /// `(selected_pod, upstream_attempts)` of every access-log line so far.
    pub(crate) fn served_by(&self) -> Vec<(String, u64)> {
        self.router.flush_access_log();
        let text = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["selected_pod"].as_str().unwrap_or("").to_owned(),
                    v["upstream_attempts"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Waits for `/readyz` 200 (first full sync and scrape).
    pub(crate) async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, _) = get(&format!("{}/readyz", self.url())).await;
            if status == http::StatusCode::OK {
                return;
            }
            assert!(Instant::now() < deadline, "router never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Names of the endpoints of ModelServer `ns/server` in the current snapshot, sorted.
    pub(crate) fn endpoints_of(&self, ns: &str, server: &str) -> Vec<String> {
        let snap = self.router.snapshot();
        let mut v: Vec<String> = snap
            .servers
            .get(&format!("{ns}/{server}"))
            .map(|s| s.endpoints.iter().map(|e| e.name.clone()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Waits until ModelServer `ns/server` has exactly `want` endpoints; returns how long
    /// it took. Panics after `limit`.
    pub(crate) async fn wait_endpoints(
        &self,
        ns: &str,
        server: &str,
        want: &[&str],
        limit: Duration,
    ) -> Duration {
        let t0 = Instant::now();
        loop {
            if self.endpoints_of(ns, server) == want {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < limit,
                "{ns}/{server} has endpoints {:?}, not {want:?}, after {limit:?}",
                self.endpoints_of(ns, server)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until endpoint `name` of the current snapshot has been scraped once.
    pub(crate) async fn wait_scraped(&self, name: &str, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let snap = self.router.snapshot();
            if snap
                .endpoints
                .iter()
                .any(|e| e.name == name && e.state().scraped)
            {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "{name} was not scraped within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until model `model` resolves to ModelServer `server` of `ns`.
    pub(crate) async fn wait_route(&self, model: &str, ns: &str, server: &str, limit: Duration) {
        let t0 = Instant::now();
        loop {
            let snap = self.router.snapshot();
            let routes: Vec<&kthena_api::ModelRoute> = snap
                .route_objects
                .iter()
                .filter(|r| r.spec.model_name == model)
                .collect();
            let targets: Vec<Option<&str>> = routes
                .iter()
                .flat_map(|r| &r.spec.rules)
                .flat_map(|r| &r.target_models)
                .map(|t| t.model_server_name.as_deref())
                .collect();
            if routes
                .iter()
                .all(|r| r.metadata.namespace.as_deref() == Some(ns))
                && targets == [Some(server)]
            {
                return;
            }
            assert!(
                t0.elapsed() < limit,
                "route of {model} never targeted {server}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends `n` sequential chat requests for `model`, asserting each is 200 at the first
    /// attempt (no request went to an endpoint that failed it); returns the pods that served
    /// them.
    pub(crate) async fn send(&self, model: &str, n: usize) -> Vec<String> {
        let before = self.served_by().len();
        for i in 0..n {
            let (status, _, body) = post(
                &format!("{}/v1/chat/completions", self.url()),
                chat(model, &format!("hello {i}"), false, 4),
                &[],
            )
            .await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        }
        let served = self.served_by()[before..].to_vec();
        assert!(
            served.iter().all(|(_, attempts)| *attempts == 1),
            "{served:?}"
        );
        served.into_iter().map(|(pod, _)| pod).collect()
    }
}

/// A ModelServer of namespace `ns` selecting `app=<app>` at `port`.
pub(crate) fn model_server(ns: &str, name: &str, model: &str, app: &str, port: u16) -> ModelServer {
    serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "model": model,
            "inferenceEngine": "vLLM",
            "workloadSelector": {"matchLabels": {"app": app}},
            "workloadPort": {"port": port},
        },
    }))
    .unwrap()
}

/// A one-rule ModelRoute of `ns` sending `model` to ModelServer `server`.
pub(crate) fn model_route(ns: &str, name: &str, model: &str, server: &str) -> ModelRoute {
    serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"modelName": model, "rules": [{"name": "default", "targetModels": [{"modelServerName": server}]}]},
    }))
    .unwrap()
}

/// Creates ModelServers and ModelRoutes in the test namespace.
pub(crate) async fn apply(ns: &TestNamespace, servers: &[ModelServer], routes: &[ModelRoute]) {
    let ms: Api<ModelServer> = ns.api();
    for s in servers {
        ms.create(&PostParams::default(), s).await.unwrap();
    }
    let mr: Api<ModelRoute> = ns.api();
    for r in routes {
        mr.create(&PostParams::default(), r).await.unwrap();
    }
}

/// A simulated node (kthena-sim's [`SimNode`], in-process) for the pods of one test
/// namespace: each pod gets a kthena-sim engine on a loopback address of its own at
/// [`Node::port`], and Running/Ready status once it answers.
pub(crate) struct Node {
    /// Held, not read: the node runs until it is dropped.
    _node: SimNode,
    /// `spec.nodeName` of the pods this node runs.
    pub name: String,
    /// The engines' port (every pod's `containerPort`; the ModelServers' `workloadPort`).
    pub port: u16,
    pods: Api<Pod>,
}

impl Node {
    pub(crate) fn start(ns: &TestNamespace) -> Self {
        Self::start_with(ns, kthena_sim::Config::default().with_time_scale(100.0))
    }

    /// As [`Node::start`] with `engine` as the engines' base configuration.
    pub(crate) fn start_with(ns: &TestNamespace, engine: kthena_sim::Config) -> Self {
        let name = format!("sim-{}", ns.name());
        let config = NodeConfig {
            node_name: Some(name.clone()),
            engine,
            health_interval: Duration::from_millis(100),
            ..NodeConfig::default()
        };
        let node = SimNode::start(ns.client().clone(), config);
        // A port that is free on 127.0.0.1; the node skips addresses where it is taken.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        Self {
            _node: node,
            name,
            port,
            pods: ns.api(),
        }
    }

    /// Creates Pod `name` labelled `app=<app>` on this node, serving `model`.
    pub(crate) async fn pod(&self, name: &str, app: &str, model: &str) {
        self.pod_with_args(name, app, model, &[]).await;
    }

    /// As [`Node::pod`], with `extra` engine arguments after `--model` and `--port`.
    pub(crate) async fn pod_with_args(&self, name: &str, app: &str, model: &str, extra: &[&str]) {
        let mut args = vec![
            "--model".to_owned(),
            model.to_owned(),
            "--port".to_owned(),
            self.port.to_string(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {
                "nodeName": self.name,
                "containers": [{
                    "name": "engine",
                    "image": "vllm/vllm-openai",
                    "args": args,
                    "ports": [{"containerPort": self.port}],
                }],
            },
        }))
        .expect("a pod");
        self.pods
            .create(&PostParams::default(), &pod)
            .await
            .expect("create the pod");
    }

    /// Makes Pod `name` NotReady (`ready` false; its engine keeps serving) or Ready again.
    pub(crate) async fn set_ready(&self, name: &str, ready: bool) {
        let value = if ready { None } else { Some("false") };
        let patch = json!({"metadata": {"annotations": {READY_ANNOTATION: value}}});
        self.pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch the pod");
    }

    /// Deletes Pod `name` (gracefully: the node stops its engine, then removes it).
    pub(crate) async fn delete(&self, name: &str) {
        self.pods
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete the pod");
    }
}

/// `deploy/` of the repository.
pub(crate) fn deploy_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy"))
}

/// The scene most cluster tests start from: Pods `pod-a` and `pod-b` (`app=sim`) on a
/// simulated node serving `<namespace>-model`, ModelServer `ms` and ModelRoute `route` for
/// them, and a ready router that lists both endpoints.
pub(crate) struct TwoPods {
    /// The namespace's name.
    pub n: String,
    /// The model both Pods serve and the route names.
    pub model: String,
    pub node: Node,
    pub router: ClusterRouter,
}

/// Builds [`TwoPods`] in `ns`.
pub(crate) async fn two_pods(ns: &TestNamespace) -> TwoPods {
    let n = ns.name().to_owned();
    let model = format!("{n}-model");
    let node = Node::start(ns);
    node.pod("pod-a", "sim", &model).await;
    node.pod("pod-b", "sim", &model).await;
    apply(
        ns,
        &[model_server(&n, "ms", &model, "sim", node.port)],
        &[model_route(&n, "route", &model, "ms")],
    )
    .await;
    let router = ClusterRouter::start(ns).await;
    router.wait_ready().await;
    router
        .wait_endpoints(&n, "ms", &["pod-a", "pod-b"], Duration::from_secs(10))
        .await;
    TwoPods {
        n,
        model,
        node,
        router,
    }
}
