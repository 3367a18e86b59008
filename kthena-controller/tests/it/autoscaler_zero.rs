//! Scale to zero and back on a real API server, with the ModelServing controller and a
//! simulated node: the routers' metrics are served by a small HTTP server of this file's own
//! behind a selector-less Service and a hand-written EndpointSlice (no EndpointSlice
//! controller runs against the test API server). The API server refuses loopback addresses
//! in an EndpointSlice (and one-label names such as `localhost`), so the server listens on
//! an ephemeral port of the machine's own non-loopback address (the source address of its
//! default route); a ModelServer selects the target's pods. The served idle seconds take a target to zero once they reach the idle
//! window, a served held request wakes it within the wake tick, and a router that answers
//! 500 keeps it running.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kthena_api::workload::AutoscalingPolicyStatus;
use kthena_api::{AutoscalingPolicy, ModelServer, ModelServing};
use kthena_controller::autoscaler::{HELD_FAMILY, IDLE_FAMILY, run_autoscaler};
use kthena_controller::serving::run;
use kthena_sim::node::SimNode;
use kthena_testenv::TestNamespace;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinSet;

/// Time between two full autoscaling rounds here: longer than the wake tick (1 s), so a
/// wake within 2.5 s is the tick's.
const SYNC: Duration = Duration::from_secs(3);
/// Upper bound for things that have no deadline of their own (a timeout, not a latency).
const WAIT: Duration = Duration::from_secs(60);
const WAITING: &str = "vllm:num_requests_waiting";
/// Name of the router metrics Service.
const ROUTERS: &str = "routers";

/// What the fake router answers: a status and the ModelServers' held and idle values.
struct Router {
    state: Arc<Mutex<(u16, String)>>,
    port: u16,
    _task: JoinSet<()>,
}

impl Router {
    async fn start(ip: &str) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Mutex::new((200, String::new())));
        let shared = Arc::clone(&state);
        let mut task = JoinSet::new();
        task.spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let (code, body) = shared.lock().map(|b| b.clone()).unwrap_or_default();
                let resp = format!(
                    "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        Ok(Self {
            state,
            port,
            _task: task,
        })
    }

    /// Answers 200 with `held` requests held and `idle` seconds for every ModelServer of
    /// `servers` (`namespace/name`).
    fn serve(&self, servers: &[String], held: u32, idle: f64) {
        let mut text = format!("# TYPE {HELD_FAMILY} gauge\n# TYPE {IDLE_FAMILY} gauge\n");
        for s in servers {
            text.push_str(&format!(
                "{HELD_FAMILY}{{model=\"m\",model_server=\"{s}\"}} {held}\n"
            ));
            text.push_str(&format!("{IDLE_FAMILY}{{model_server=\"{s}\"}} {idle}\n"));
        }
        if let Ok(mut st) = self.state.lock() {
            *st = (200, text);
        }
    }

    fn fail(&self) {
        if let Ok(mut st) = self.state.lock() {
            *st = (500, "oops".to_owned());
        }
    }
}

struct Env {
    ns: TestNamespace,
    router: Router,
    _tasks: JoinSet<()>,
    _node: SimNode,
}

/// The ModelServing controller, the autoscaler (reading Service [`ROUTERS`]), the simulated
/// node, and the fake router, behind the Service's EndpointSlice.
async fn setup(prefix: &str) -> Result<Env> {
    let ns = kthena_testenv::namespace(prefix).await?;
    let ip = host_ip()?;
    let router = Router::start(&ip).await?;
    router_service(&ns, ROUTERS, &ip, router.port).await?;
    let mut tasks = JoinSet::new();
    let config = crate::ms_support::serving_config(&ns);
    tasks.spawn(run(ns.client().clone(), config, std::future::pending()));
    let autoscaler = crate::autoscaler::autoscaler_config(&ns, SYNC, ROUTERS);
    let client = ns.client().clone();
    tasks.spawn(run_autoscaler(client, autoscaler, std::future::pending()));
    let node = crate::ms_support::sim_node(&ns);
    Ok(Env {
        ns,
        router,
        _tasks: tasks,
        _node: node,
    })
}

/// The machine's non-loopback IPv4 address: the source address of its route to a
/// documentation address (a UDP connect sends nothing).
pub(crate) fn host_ip() -> Result<String> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
    s.connect("203.0.113.1:9")
        .context("no route off the loopback interface: these tests need one")?;
    let ip = s.local_addr()?.ip();
    if ip.is_loopback() || ip.is_unspecified() {
        bail!("no non-loopback address ({ip})");
    }
    Ok(ip.to_string())
}

/// A selector-less Service `name` and its EndpointSlice: `ip`, port `metrics` `port` (the
/// Service the autoscaler reads the routers' metrics through).
pub(crate) async fn router_service(
    ns: &TestNamespace,
    name: &str,
    ip: &str,
    port: u16,
) -> Result<()> {
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"ports": [{"name": "metrics", "port": 9090}]},
    }))?;
    ns.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{name}-1"),
                     "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "ports": [{"name": "metrics", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
    }))?;
    ns.api::<EndpointSlice>()
        .create(&PostParams::default(), &slice)
        .await?;
    Ok(())
}

/// A ModelServer `name` selecting the pods labelled `app: <app>`; its `namespace/name`.
async fn model_server(ns: &TestNamespace, name: &str, app: &str) -> Result<String> {
    let s: ModelServer = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ModelServer",
        "metadata": {"name": name},
        "spec": {"model": "m", "inferenceEngine": "vLLM",
                 "workloadSelector": {"matchLabels": {"app": app}},
                 "workloadPort": {"port": 8100}},
    }))?;
    ns.api::<ModelServer>()
        .create(&PostParams::default(), &s)
        .await?;
    Ok(format!("{}/{name}", ns.name()))
}

/// A simulated engine role `name` with `replicas`, its pods labelled `app: <app>`.
fn role(name: &str, replicas: i32, app: &str) -> Value {
    json!({
        "name": name, "replicas": replicas, "workerReplicas": 0,
        "entryTemplate": {
            "metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "engine", "image": "kthena-sim",
                "command": ["kthena-sim"], "args": ["--model", "m"],
                "ports": [{"containerPort": 8100}]}]},
        },
    })
}

async fn create_serving(
    ns: &TestNamespace,
    name: &str,
    replicas: i32,
    roles: &[Value],
) -> Result<()> {
    let ms: ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelServing",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": {"roles": roles}},
    }))?;
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    Ok(())
}

/// Creates the policy `name` with `spec` (metric: waiting requests, 2 per replica), defaulted
/// as the webhook does; a 3 s idle window.
async fn create_policy(ns: &TestNamespace, name: &str, mut spec: Value) -> Result<()> {
    spec["metrics"] = json!([{"name": WAITING, "targetValue": "2"}]);
    spec["behavior"] = json!({"scaleToZero": {"idleWindow": "3s"}});
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "AutoscalingPolicy",
        "metadata": {"name": name}, "spec": spec,
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    Ok(())
}

/// A pod metric source of the waiting gauge on the engines' port.
fn pod_source() -> Value {
    json!({WAITING: {"pod": {"port": 8100}}})
}

/// `spec.replicas` of ModelServing `name` (unset: 1).
async fn replicas(ns: &TestNamespace, name: &str) -> Result<i32> {
    let ms = ns.api::<ModelServing>().get(name).await?;
    Ok(ms.spec.replicas.unwrap_or(1))
}

/// The replicas of every role of ModelServing `name`, in template order.
async fn role_replicas(ns: &TestNamespace, name: &str) -> Result<Vec<i32>> {
    let ms = ns.api::<ModelServing>().get(name).await?;
    Ok(ms
        .spec
        .template
        .roles
        .iter()
        .map(|r| r.replicas.unwrap_or(1))
        .collect())
}

/// Polls `read` every 100 ms until it returns `want`; the time that took.
async fn until<T, F, Fut>(what: &str, want: T, mut read: F) -> Result<Duration>
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        let got = read().await?;
        if got == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > WAIT {
            bail!("{what}: still {got:?}, wanted {want:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks `read` gives `want` at every 200 ms sample for `span`.
async fn stays<T, F, Fut>(what: &str, want: T, span: Duration, mut read: F) -> Result<()>
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let end = tokio::time::Instant::now() + span;
    while tokio::time::Instant::now() < end {
        let got = read().await?;
        if got != want {
            bail!("{what}: became {got:?}, expected to stay {want:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// The number of pods of ModelServing `name` that are Running and Ready.
async fn ready_pods(ns: &TestNamespace, name: &str) -> Result<(usize, usize)> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={name}"));
    let pods = ns.api::<Pod>().list(&lp).await?.items;
    let ready = pods
        .iter()
        .filter(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        })
        .count();
    Ok((pods.len(), ready))
}

/// The `ScaleToZero` condition's `(status, reason, message)`.
async fn zero_condition(
    ns: &TestNamespace,
    policy: &str,
) -> Result<Option<(String, String, String)>> {
    let st: Option<AutoscalingPolicyStatus> =
        ns.api::<AutoscalingPolicy>().get(policy).await?.status;
    Ok(st
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == "ScaleToZero")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())))
}

#[tokio::test]
async fn a_homogeneous_target_idles_to_zero_wakes_on_a_held_request_and_stays_up_without_an_answer()
-> Result<()> {
    let env = setup("zero-homo").await?;
    let ns = &env.ns;
    let server = model_server(ns, "llama", "llama").await?;
    let servers = [server];
    env.router.serve(&servers, 0, 1.0);
    create_serving(ns, "llama", 1, &[role("engine", 1, "llama")]).await?;
    until("llama ready", (1, 1), || ready_pods(ns, "llama")).await?;
    create_policy(
        ns,
        "llama",
        json!({"homogeneousTarget": {"minReplicas": 0, "maxReplicas": 2,
        "target": {"targetRef": {"name": "llama"}, "metricSources": pod_source()}}}),
    )
    .await?;
    // Idle 1 s of a 3 s window: two full rounds keep one replica.
    stays("replicas", 1, SYNC * 2 + Duration::from_millis(500), || {
        replicas(ns, "llama")
    })
    .await?;
    let enabled = zero_condition(ns, "llama").await?.map(|c| c.1);
    assert_eq!(enabled.as_deref(), Some("Enabled"));
    env.router.serve(&servers, 0, 3.0);
    let took = until("to zero", 0, || replicas(ns, "llama")).await?;
    assert!(
        took <= SYNC + Duration::from_secs(2),
        "to zero after {took:?}"
    );
    until("every pod gone", (0, 0), || ready_pods(ns, "llama")).await?;
    // At zero, more idle time keeps it there; a held request wakes it within the wake tick.
    env.router.serve(&servers, 0, 100.0);
    stays("replicas", 0, Duration::from_secs(2), || {
        replicas(ns, "llama")
    })
    .await?;
    env.router.serve(&servers, 1, 0.0);
    let took = until("woken", 1, || replicas(ns, "llama")).await?;
    assert!(took <= Duration::from_millis(2500), "woken after {took:?}");
    until("llama ready again", (1, 1), || ready_pods(ns, "llama")).await?;
    // A router that answers 500 never lets it go to zero, however idle it was.
    env.router.fail();
    let c = until("blocked", Some("Blocked".to_owned()), || async {
        Ok(zero_condition(ns, "llama").await?.map(|c| c.1))
    })
    .await;
    c?;
    let (status, _, message) = zero_condition(ns, "llama").await?.unwrap_or_default();
    assert_eq!(status, "False");
    assert_eq!(
        message,
        format!(
            "router {}:{} did not answer; the target is not scaled to 0 replicas while this lasts",
            host_ip()?,
            env.router.port
        )
    );
    stays("replicas", 1, SYNC * 2, || replicas(ns, "llama")).await?;
    Ok(())
}

#[tokio::test]
async fn the_roles_of_a_disaggregated_target_go_to_zero_and_wake_together() -> Result<()> {
    let env = setup("zero-pd").await?;
    let ns = &env.ns;
    let servers = [model_server(ns, "pd", "pd").await?];
    env.router.serve(&servers, 0, 0.0);
    let roles = [role("decode", 1, "pd"), role("prefill", 1, "pd")];
    create_serving(ns, "pd", 1, &roles).await?;
    until("pd ready", (2, 2), || ready_pods(ns, "pd")).await?;
    let bounds = json!({"minReplicas": 0, "maxReplicas": 2, "metricSources": pod_source()});
    create_policy(
        ns,
        "pd",
        json!({"disaggregatedTarget": {"targetRef": {"name": "pd"},
        "roles": {"decode": bounds.clone(), "prefill": bounds},
        "ratioConstraint": {"numeratorRole": "prefill", "denominatorRole": "decode",
                            "minRatio": "1", "maxRatio": "1"}}}),
    )
    .await?;
    stays(
        "roles",
        vec![1, 1],
        SYNC + Duration::from_millis(500),
        || role_replicas(ns, "pd"),
    )
    .await?;
    env.router.serve(&servers, 0, 10.0);
    until("roles to zero", vec![0, 0], || role_replicas(ns, "pd")).await?;
    until("every pod gone", (0, 0), || ready_pods(ns, "pd")).await?;
    env.router.serve(&servers, 2, 0.0);
    let took = until("roles woken", vec![1, 1], || role_replicas(ns, "pd")).await?;
    assert!(took <= Duration::from_millis(2500), "woken after {took:?}");
    until("pd ready again", (2, 2), || ready_pods(ns, "pd")).await?;
    Ok(())
}

#[tokio::test]
async fn a_heterogeneous_policy_goes_to_zero_and_wakes_on_the_cheapest_target() -> Result<()> {
    let env = setup("zero-het").await?;
    let ns = &env.ns;
    let servers = [model_server(ns, "shared", "het").await?];
    env.router.serve(&servers, 0, 0.0);
    create_serving(ns, "cheap", 1, &[role("engine", 1, "het")]).await?;
    create_serving(ns, "dear", 0, &[role("engine", 1, "het")]).await?;
    until("cheap ready", (1, 1), || ready_pods(ns, "cheap")).await?;
    let param = |name: &str, cost: i32| {
        json!({"target": {"targetRef": {"name": name}, "metricSources": pod_source()},
               "cost": cost, "minReplicas": 0, "maxReplicas": 2})
    };
    create_policy(
        ns,
        "het",
        json!({"heterogeneousTarget": {
        "params": [param("dear", 10), param("cheap", 1)]}}),
    )
    .await?;
    let both = || async { Ok((replicas(ns, "cheap").await?, replicas(ns, "dear").await?)) };
    stays("replicas", (1, 0), SYNC + Duration::from_millis(500), both).await?;
    env.router.serve(&servers, 0, 60.0);
    until("total to zero", (0, 0), both).await?;
    env.router.serve(&servers, 1, 0.0);
    let took = until("woken on the cheapest", (1, 0), both).await?;
    assert!(took <= Duration::from_millis(2500), "woken after {took:?}");
    until("cheap ready again", (1, 1), || ready_pods(ns, "cheap")).await?;
    Ok(())
}
