//! Helpers of the cluster-mode tests: a router in cluster mode on the test control plane,
//! manifests, and Pods made real by kthena-sim engines on their own loopback addresses.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]
#![allow(
    dead_code,
    reason = "each test binary uses a different subset of the helpers"
)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kthena_api::{ModelRoute, ModelServer};
use kthena_router::Router;
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
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let text = format!(
            "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\n\
             metricsScrapeInterval: 100ms\n\
             accessLog: {{format: json, output: \"{}\"}}\n\
             scheduler:\n  plugins:\n    Filter: {{enabled: []}}\n    Score:\n      enabled:\n      - {{name: least-request, weight: 1}}\n",
            log.display()
        );
        let path = dir.path().join("router.yaml");
        std::fs::write(&path, &text).unwrap();
        let cfg = kthena_router::Config::from_yaml(&path, &text)
            .unwrap()
            .validate(&path)
            .unwrap();
        assert!(cfg.is_cluster_mode());
        let router = Router::start_in_cluster(cfg, ns.client().clone())
            .await
            .unwrap();
        Self { dir, router }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.router.addr)
    }

    /// `selected_pod` of every access-log line so far.
    pub(crate) fn served_by(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["selected_pod"].as_str().unwrap_or("").to_owned()
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

    /// Sends `n` sequential chat requests for `model`, asserting each is 200; returns the
    /// pods that served them.
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
        self.served_by()[before..].to_vec()
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

static NEXT_HOST: AtomicU32 = AtomicU32::new(1);

/// A loopback address of its own: `127.<pid-derived>.<n>.<n>` so parallel test processes
/// do not collide.
pub(crate) fn loopback() -> IpAddr {
    let n = NEXT_HOST.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let b = u8::try_from(50 + pid % 200).unwrap();
    IpAddr::V4(Ipv4Addr::new(
        127,
        b,
        u8::try_from(n / 250).unwrap(),
        u8::try_from(1 + n % 250).unwrap(),
    ))
}

/// A Pod made real: a kthena-sim engine on its own loopback address, and the Pod object
/// whose status says `Running`, `Ready` at that address.
pub(crate) struct SimPod {
    pub name: String,
    pub engine: kthena_sim::SimHandle,
    pods: Api<Pod>,
}

impl SimPod {
    /// Starts an engine for `model` on a fresh loopback address at `port` (0: any), creates
    /// Pod `name` labelled `app=<app>` and marks it Running and Ready at that address.
    pub(crate) async fn start(
        ns: &TestNamespace,
        name: &str,
        app: &str,
        model: &str,
        port: u16,
    ) -> Self {
        let mut cfg = kthena_sim::Config::default()
            .with_model(model)
            .with_time_scale(100.0);
        cfg.host = loopback();
        cfg.port = port;
        let engine = kthena_sim::spawn(cfg).await.unwrap();
        let pods: Api<Pod> = ns.api();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{
                "name": "engine",
                "image": "kthena-sim",
                "ports": [{"containerPort": engine.addr().port()}],
            }]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let me = Self {
            name: name.to_owned(),
            engine,
            pods,
        };
        me.set_ready(true).await;
        me
    }

    /// The engine's port.
    pub(crate) fn port(&self) -> u16 {
        self.engine.addr().port()
    }

    /// Writes `phase: Running`, the engine's address and `Ready=<ready>` into the status.
    pub(crate) async fn set_ready(&self, ready: bool) {
        let ip = self.engine.addr().ip().to_string();
        let status = json!({"status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
        }});
        self.pods
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    /// Deletes the Pod object (the engine keeps running, so a request sent to it would be
    /// answered and seen).
    pub(crate) async fn delete(&self) {
        self.pods
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// Labels as a map.
pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// `deploy/` of the repository.
pub(crate) fn deploy_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy"))
}

/// A free address for an engine: `SocketAddr` helper for tests that need one.
pub(crate) fn addr(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}
