//! The autoscaler controller on a real API server (kthena-testenv) with the ModelServing
//! controller and a simulated node: engine queues drive `spec.replicas` of a ModelServing.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_controller::autoscaler::{AutoscalerConfig, run_autoscaler};
use kthena_controller::manager::{Controllers, LEASE_NAME, LeaderElection, run_leader_elected};
use kthena_controller::serving::run;
use kthena_sim::node::SimNode;
use kthena_testenv::TestNamespace;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use tokio::task::JoinSet;

/// Time between two autoscaling rounds in these tests.
const SYNC: Duration = Duration::from_secs(2);
/// Upper bound for things that have no deadline of their own (a timeout, not a latency).
const WAIT: Duration = Duration::from_secs(60);
const WAITING: &str = "vllm:num_requests_waiting";

mod prometheus;
mod prometheus_tls;
mod scale_to_zero;
use prometheus::{prom_value, start_prometheus};

struct Env {
    ns: TestNamespace,
    _tasks: JoinSet<()>,
    node: SimNode,
}

async fn setup(prefix: &str) -> Result<Env> {
    setup_with(prefix, false).await
}

/// The controllers in a fresh namespace; with `elected`, both run under
/// `run_leader_elected` (the autoscaler through `Controllers::autoscaler`).
async fn setup_with(prefix: &str, elected: bool) -> Result<Env> {
    let ns = kthena_testenv::namespace(prefix).await?;
    let mut tasks = JoinSet::new();
    // The routers' metrics Service of the scale-to-zero tests (`scale_to_zero::router`);
    // the others create none and set no `minReplicas: 0`, so it is never read.
    let autoscaler = autoscaler_config(&ns, SYNC, "kthena-router-metrics");
    let config = crate::ms_support::serving_config(&ns);
    if elected {
        let config = Controllers {
            serving: config,
            autoscaler: Some(autoscaler),
            booster: None,
        };
        let election = LeaderElection {
            lease_name: LEASE_NAME.to_owned(),
            namespace: ns.name().to_owned(),
            identity: "autoscaler-test".to_owned(),
            duration: Duration::from_secs(3),
            retry: Duration::from_secs(1),
        };
        let client = ns.client().clone();
        tasks.spawn(async move {
            let _ = run_leader_elected(client, config, election, std::future::pending()).await;
        });
    } else {
        tasks.spawn(run(ns.client().clone(), config, std::future::pending()));
        tasks.spawn(run_autoscaler(
            ns.client().clone(),
            autoscaler,
            std::future::pending(),
        ));
    }
    let node = crate::ms_support::sim_node(&ns);
    Ok(Env {
        ns,
        _tasks: tasks,
        node,
    })
}

/// The autoscaler's settings in the tests: only `ns`, rounds every `sync`, the routers'
/// metrics behind the Service `routers` of `ns`.
pub(crate) fn autoscaler_config(
    ns: &TestNamespace,
    sync: Duration,
    routers: &str,
) -> AutoscalerConfig {
    AutoscalerConfig {
        namespace: Some(ns.name().to_owned()),
        sync_period: sync,
        router_metrics: Some(kthena_controller::autoscaler::RouterMetrics {
            namespace: ns.name().to_owned(),
            name: routers.to_owned(),
        }),
        ..AutoscalerConfig::default()
    }
}

/// A one-role ModelServing whose engines run one sequence at a time, so concurrent requests
/// queue (`vllm:num_requests_waiting`), serving metrics on port 8100.
async fn create_serving(ns: &TestNamespace, name: &str) -> Result<()> {
    create_serving_with(ns, name, &[]).await
}

/// [`create_serving`] with more kthena-sim flags for the engines.
async fn create_serving_with(ns: &TestNamespace, name: &str, flags: &[&str]) -> Result<()> {
    let mut args = vec!["--model", "m", "--max-num-seqs", "1"];
    args.extend_from_slice(flags);
    create_serving_of(ns, name, 1, 8100, &args).await
}

/// A one-role ModelServing at `replicas` whose engines are kthena-sim with `args`, serving on
/// `port`.
async fn create_serving_of(
    ns: &TestNamespace,
    name: &str,
    replicas: i32,
    port: u16,
    args: &[&str],
) -> Result<()> {
    let ms: ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name, "namespace": ns.name()},
        "spec": {
            "replicas": replicas,
            "template": {"roles": [{
                "name": "engine",
                "replicas": 1,
                "workerReplicas": 0,
                "entryTemplate": {"spec": {"containers": [{
                    "name": "engine",
                    "image": "kthena-sim",
                    "command": ["kthena-sim"],
                    "args": args,
                    "ports": [{"containerPort": port}],
                }]}},
            }]},
        },
    }))?;
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    Ok(())
}

/// A homogeneous policy on `target`: 2 waiting requests per replica, 1..=4 replicas, the
/// webhook's default scale-up (4 instances Or 100 % per minute) and a 6 s scale-down
/// stabilization window.
async fn create_policy(ns: &TestNamespace, target: &str, source: serde_json::Value) -> Result<()> {
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": format!("{target}-policy"), "namespace": ns.name()},
        "spec": {
            "metrics": [{"name": WAITING, "targetValue": "2"}],
            "behavior": {"scaleDown": {"instances": 0, "percent": 100, "period": "1m",
                                       "stabilizationWindow": "6s"}},
            "homogeneousTarget": {
                "minReplicas": 1,
                "maxReplicas": 4,
                "target": {"targetRef": {"kind": "ModelServing", "name": target},
                           "metricSources": {WAITING: source}},
            },
        },
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    Ok(())
}

async fn replicas(ns: &TestNamespace, name: &str) -> Result<i32> {
    Ok(ns
        .api::<ModelServing>()
        .get(name)
        .await?
        .spec
        .replicas
        .unwrap_or(1))
}

/// The IP of the first Running and Ready entry pod of `name`.
async fn entry_ip(ns: &TestNamespace, name: &str) -> Result<String> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={name}"));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let pods = ns.api::<Pod>().list(&lp).await?;
        if let Some(ip) = pods.items.iter().find_map(|p| {
            let st = p.status.as_ref()?;
            let ready = st
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then(|| st.pod_ip.clone()).flatten()
        }) {
            return Ok(ip);
        }
        if tokio::time::Instant::now() > deadline {
            let seen: Vec<_> = pods
                .items
                .iter()
                .map(|p| (p.metadata.name.clone(), p.status.clone()))
                .collect();
            bail!("no ready entry pod of {name}; pods: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

fn http() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// `n` concurrent long completions against the engine at `ip` (aborted when the set drops).
fn load(ip: &str, n: usize) -> JoinSet<()> {
    load_via(&format!("{ip}:8100"), "m", n)
}

/// `n` concurrent long completions of `model` sent to `addr` (an engine or a router).
fn load_via(addr: &str, model: &str, n: usize) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for _ in 0..n {
        let url = format!("http://{addr}/v1/completions");
        let model = model.to_owned();
        set.spawn(async move {
            let body = json!({"model": model, "prompt": "hello", "max_tokens": 20000}).to_string();
            let req = http::Request::post(url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .expect("a valid request");
            if let Ok(resp) = http().request(req).await {
                let _ = resp.into_body().collect().await;
            }
        });
    }
    set
}

/// The whole body of the answer to `req`.
async fn body_of(req: http::Request<Full<Bytes>>) -> Result<Bytes> {
    Ok(http()
        .request(req)
        .await?
        .into_body()
        .collect()
        .await?
        .to_bytes())
}

/// The engine's own `vllm:num_requests_waiting`.
async fn waiting(ip: &str) -> Result<f64> {
    let req =
        http::Request::get(format!("http://{ip}:8100/metrics")).body(Full::new(Bytes::new()))?;
    let body = body_of(req).await?;
    let text = String::from_utf8(body.to_vec())?;
    text.lines()
        .filter(|l| l.starts_with(WAITING))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
        .context("no waiting gauge")
}

/// Waits until the engine at `ip` reports at least `n` waiting requests.
async fn queue_at_least(ip: &str, n: f64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while waiting(ip).await? < n {
        if tokio::time::Instant::now() > deadline {
            bail!("the queue never reached {n}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Polls the policy's status until `ok` holds.
async fn status_where(
    ns: &TestNamespace,
    name: &str,
    ok: impl Fn(&kthena_api::workload::AutoscalingPolicyStatus) -> bool,
) -> Result<kthena_api::workload::AutoscalingPolicyStatus> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let st = ns.api::<AutoscalingPolicy>().get(name).await?.status;
        if let Some(st) = st.filter(|s| ok(s)) {
            return Ok(st);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the status of {name} never matched");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Samples `replicas` every second for `d`.
async fn sample(ns: &TestNamespace, name: &str, d: Duration) -> Result<Vec<i32>> {
    let mut out = Vec::new();
    let end = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < end {
        out.push(replicas(ns, name).await?);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(out)
}

#[tokio::test]
async fn queues_scale_up_within_two_sync_periods_then_down_after_the_window() -> Result<()> {
    let env = setup("as-up").await?;
    let ns = &env.ns;
    create_serving(ns, "llm").await?;
    // The entry pods, chosen by matchExpressions on the labels the controller writes.
    let selector = json!({"matchExpressions": [
        {"key": "modelserving.volcano.sh/role", "operator": "In", "values": ["engine"]},
        {"key": "modelserving.volcano.sh/entry", "operator": "Exists"},
        {"key": "modelserving.volcano.sh/name", "operator": "NotIn", "values": ["other"]},
        {"key": "kthena.test/excluded", "operator": "DoesNotExist"},
    ]});
    let source = json!({"pod": {"port": 8100, "labelSelector": selector}});
    create_policy(ns, "llm", source).await?;
    let ip = entry_ip(ns, "llm").await?;
    // Idle: 0 waiting ⇒ the minimum, 1 replica.
    let idle = sample(ns, "llm", SYNC * 2).await?;
    assert!(idle.iter().all(|&r| r == 1), "{idle:?}");
    // 9 requests: 1 running, 8 waiting ⇒ ceil(8 / 2) = 4 (the scale-up limit allows 1 + 4).
    let load = load(&ip, 9);
    queue_at_least(&ip, 8.0).await?;
    let seen = tokio::time::Instant::now();
    let deadline = seen + SYNC * 2 + Duration::from_millis(1500);
    while replicas(ns, "llm").await? != 4 {
        if tokio::time::Instant::now() > deadline {
            bail!("not scaled to 4 within two sync periods of the queue rising");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The status is written right after the patch: poll for it.
    let st = status_where(ns, "llm-policy", |st| {
        st.homogeneous_status
            .as_ref()
            .is_some_and(|h| h.desired_replicas == Some(4))
    })
    .await?;
    let h = st.homogeneous_status.context("no homogeneous status")?;
    assert!([1, 4].contains(&h.current_replicas), "{h:?}");
    assert_eq!(h.mode.as_deref(), Some("Stable"));
    assert!(h.last_scale_time.is_some());
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    // Load stops: the 6 s stabilization window holds 4, then one step down to 1; sampled every
    // second, never back up.
    drop(load);
    let samples = sample(ns, "llm", Duration::from_secs(14)).await?;
    let first_one = samples
        .iter()
        .position(|&r| r == 1)
        .context("never scaled down")?;
    assert!(first_one >= 4, "scaled down before the window: {samples:?}");
    assert!(samples[..first_one].iter().all(|&r| r == 4), "{samples:?}");
    assert!(
        samples[first_one..].iter().all(|&r| r == 1),
        "flapping: {samples:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_metrics_endpoint_that_fails_or_answers_garbage_never_scales() -> Result<()> {
    let env = setup("as-bad").await?;
    let ns = &env.ns;
    create_serving(ns, "nf").await?;
    create_serving(ns, "junk").await?;
    create_serving_with(ns, "fail", &["--fault-metrics-status", "500"]).await?;
    // 500 on /metrics itself; 404 on an unknown path; JSON (not metrics text) on /v1/models.
    create_policy(
        ns,
        "fail",
        json!({"pod": {"port": 8100, "uri": "/metrics"}}),
    )
    .await?;
    create_policy(
        ns,
        "nf",
        json!({"pod": {"port": 8100, "uri": "/no-such-metrics"}}),
    )
    .await?;
    create_policy(
        ns,
        "junk",
        json!({"pod": {"port": 8100, "uri": "/v1/models"}}),
    )
    .await?;
    let _a = load(&entry_ip(ns, "nf").await?, 9);
    let _b = load(&entry_ip(ns, "junk").await?, 9);
    let fail_ip = entry_ip(ns, "fail").await?;
    let _c = load(&fail_ip, 9);
    let samples = sample(ns, "nf", SYNC * 3).await?;
    assert!(samples.iter().all(|&r| r == 1), "{samples:?}");
    assert_eq!(replicas(ns, "junk").await?, 1);
    assert_eq!(replicas(ns, "fail").await?, 1);
    // The engine serves; only its metrics endpoint fails.
    let req = http::Request::get(format!("http://{fail_ip}:8100/metrics"))
        .body(Full::new(Bytes::new()))?;
    assert_eq!(http().request(req).await?.status(), 500);
    for name in ["nf-policy", "junk-policy", "fail-policy"] {
        let st = ns
            .api::<AutoscalingPolicy>()
            .get(name)
            .await?
            .status
            .context("no status")?;
        let h = st.homogeneous_status.context("no homogeneous status")?;
        assert_eq!(
            (h.current_replicas, h.desired_replicas),
            (1, None),
            "{name}"
        );
        assert_eq!(h.mode, None, "{name}: no decision was made");
    }
    Ok(())
}

fn role(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "replicas": 1,
        "workerReplicas": 0,
        "entryTemplate": {"spec": {"containers": [{
            "name": "engine",
            "image": "kthena-sim",
            "command": ["kthena-sim"],
            "args": ["--model", "m", "--max-num-seqs", "1", "--role", name],
            "ports": [{"containerPort": 8100}],
        }]}},
    })
}

/// `(prefill, decode)` role replicas of `name`.
async fn role_replicas(ns: &TestNamespace, name: &str) -> Result<(i32, i32)> {
    let ms = ns.api::<ModelServing>().get(name).await?;
    let get = |role: &str| {
        ms.spec
            .template
            .roles
            .iter()
            .find(|r| r.name == role)
            .and_then(|r| r.replicas)
            .unwrap_or(1)
    };
    Ok((get("prefill"), get("decode")))
}

#[tokio::test]
async fn a_disaggregated_target_keeps_the_role_ratio_at_every_sample() -> Result<()> {
    let env = setup("as-pd").await?;
    let ns = &env.ns;
    let ms: ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "pd", "namespace": ns.name()},
        "spec": {"replicas": 1, "template": {"roles": [role("prefill"), role("decode")]}},
    }))?;
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    let source = json!({WAITING: {"pod": {"port": 8100}}});
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "pd-policy", "namespace": ns.name()},
        "spec": {
            "metrics": [{"name": WAITING, "targetValue": "2"}],
            "disaggregatedTarget": {
                "targetRef": {"kind": "ModelServing", "name": "pd"},
                "roles": {
                    "prefill": {"minReplicas": 1, "maxReplicas": 4, "metricSources": source},
                    "decode": {"minReplicas": 1, "maxReplicas": 8, "metricSources": source},
                },
                "ratioConstraint": {"numeratorRole": "prefill", "denominatorRole": "decode",
                                    "minRatio": "0.5", "maxRatio": "1"},
            },
        },
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    // The router disaggregates: each request's prefill (1 token) on the prefill pod, then
    // its decode on the decode pod of the same group.
    let router = cluster_router_with(
        ns,
        "pd",
        json!({
            "workloadSelector": {"pdGroup": {
                "groupKey": "modelserving.volcano.sh/group-name",
                "prefillLabels": {"modelserving.volcano.sh/role": "prefill"},
                "decodeLabels": {"modelserving.volcano.sh/role": "decode"},
            }},
            "kvConnector": {"type": "nixl"},
        }),
    )
    .await?;
    // Nine long requests through it: prefill finishes at once, decode runs 1 and queues 8
    // ⇒ decode 4; prefill recommends 1, raised to ceil(0.5 × 4) = 2 by the ratio.
    let lp = ListParams::default().labels("modelserving.volcano.sh/role=decode");
    let pods = ns.api::<Pod>().list(&lp).await?;
    let ip = pods
        .items
        .iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .context("decode ip")?;
    let _load = load_via(&router.addr.to_string(), &routed_model(ns), 9);
    queue_at_least(&ip, 8.0).await?;
    let mut samples = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (p, d) = role_replicas(ns, "pd").await?;
        samples.push((p, d));
        assert!(2 * p >= d && p <= d, "ratio outside [0.5, 1]: {samples:?}");
        if (p, d) == (2, 4) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("never reached prefill 2, decode 4: {samples:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let st = status_where(ns, "pd-policy", |st| st.disaggregated_status.is_some()).await?;
    let d = st.disaggregated_status.context("no disaggregated status")?;
    // Recommendations (the status' desiredReplicas): decode 4, prefill 1 (before the ratio).
    let roles: Vec<_> = d
        .roles
        .iter()
        .map(|r| (r.name.clone().unwrap_or_default(), r.desired_replicas))
        .collect();
    assert_eq!(
        roles,
        vec![
            ("decode".to_owned(), Some(4)),
            ("prefill".to_owned(), Some(1))
        ]
    );
    let ratio = d.ratio_status.context("no ratio status")?;
    assert_eq!(ratio.current_ratio.as_deref(), Some("0.5"));
    assert_eq!(d.ratio_adjusted, Some(true));
    Ok(())
}

#[tokio::test]
async fn a_prometheus_sourced_metric_drives_the_same_scale_up() -> Result<()> {
    let env = setup("as-prom").await?;
    let ns = &env.ns;
    create_serving(ns, "pq").await?;
    let ip = entry_ip(ns, "pq").await?;
    let router = cluster_router(ns, "pq").await?;
    let prom = start_prometheus(ns.name(), &format!("{ip}:8100")).await?;
    let query = format!("sum({WAITING})");
    let source = json!({"prometheus": {"serverURL": prom.url, "query": query}});
    create_policy(ns, "pq", source).await?;
    // Nine long requests through the router: the engine runs 1 and queues 8.
    let _load = load_via(&router.addr.to_string(), &routed_model(ns), 9);
    let deadline = tokio::time::Instant::now() + WAIT;
    while prom_value(&prom.url, &query).await? < 8.0 {
        if tokio::time::Instant::now() > deadline {
            bail!("prometheus never saw the queue");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = tokio::time::Instant::now() + SYNC * 2 + Duration::from_millis(1500);
    while replicas(ns, "pq").await? != 4 {
        if tokio::time::Instant::now() > deadline {
            bail!("not scaled to 4 within two sync periods of Prometheus seeing the queue");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_heterogeneous_policy_fills_the_cheapest_target_first() -> Result<()> {
    let env = setup("as-het").await?;
    let ns = &env.ns;
    create_serving(ns, "cheap").await?;
    create_serving(ns, "dear").await?;
    let source = json!({WAITING: {"pod": {"port": 8100}}});
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": "het-policy", "namespace": ns.name()},
        "spec": {
            "metrics": [{"name": WAITING, "targetValue": "2"}],
            "heterogeneousTarget": {"params": [
                {"cost": 10, "minReplicas": 0, "maxReplicas": 4,
                 "target": {"targetRef": {"name": "dear"}, "metricSources": source}},
                {"cost": 1, "minReplicas": 1, "maxReplicas": 2,
                 "target": {"targetRef": {"name": "cheap"}, "metricSources": source}},
            ]},
        },
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    // Idle: the total goes to Σ min = 1, all of it the cheap target's minimum.
    let deadline = tokio::time::Instant::now() + WAIT;
    while (replicas(ns, "cheap").await?, replicas(ns, "dear").await?) != (1, 0) {
        if tokio::time::Instant::now() > deadline {
            bail!("never settled at cheap 1, dear 0");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // 8 waiting on cheap ⇒ total 4: cheap's package (1 at cost 1) first, then dear's two
    // single-replica packages (cost 10 each) before its 2-replica one (cost 20).
    let ip = entry_ip(ns, "cheap").await?;
    let _load = load(&ip, 9);
    queue_at_least(&ip, 8.0).await?;
    let deadline = tokio::time::Instant::now() + SYNC * 2 + Duration::from_millis(1500);
    while (replicas(ns, "cheap").await?, replicas(ns, "dear").await?) != (2, 2) {
        if tokio::time::Instant::now() > deadline {
            bail!("not at cheap 2, dear 2 within two sync periods");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = status_where(ns, "het-policy", |st| {
        st.heterogeneous_status
            .iter()
            .any(|s| s.desired_replicas == Some(2) && s.name.as_deref() == Some("dear"))
    })
    .await?;
    let names: Vec<_> = st
        .heterogeneous_status
        .iter()
        .map(|s| s.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, vec!["dear", "cheap"]);
    Ok(())
}

#[tokio::test]
async fn the_leader_runs_the_autoscaler() -> Result<()> {
    let env = setup_with("as-lead", true).await?;
    let ns = &env.ns;
    create_serving(ns, "led").await?;
    create_policy(ns, "led", json!({"pod": {"port": 8100}})).await?;
    let ip = entry_ip(ns, "led").await?;
    let _load = load(&ip, 9);
    queue_at_least(&ip, 8.0).await?;
    let deadline = tokio::time::Instant::now() + SYNC * 2 + Duration::from_millis(1500);
    while replicas(ns, "led").await? != 4 {
        if tokio::time::Instant::now() > deadline {
            bail!("the leader did not scale within two sync periods");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The router in cluster mode, in process, routing model [`routed_model`] to the engines
/// (model `m`) of the ModelServing `target`'s entry pods (port 8100); returns once it has
/// served a request. The router watches every namespace (as Go's does), so each test's
/// ModelRoute has a model name of its own.
async fn cluster_router(ns: &TestNamespace, target: &str) -> Result<kthena_router::Router> {
    cluster_router_with(ns, target, json!({})).await
}

/// [`cluster_router`] whose ModelServer spec also has the members of `extra` (a `pdGroup`
/// in `workloadSelector`, a `kvConnector`).
async fn cluster_router_with(
    ns: &TestNamespace,
    target: &str,
    extra: serde_json::Value,
) -> Result<kthena_router::Router> {
    model_server_and_route(ns, target, extra).await?;
    let text = "port: 0\nmetricsPort: 0\ndebugPort: 0\nbindAddress: 127.0.0.1\naccessLog: {enabled: false}\n";
    let path = std::path::Path::new("router.yaml");
    let cfg = kthena_router::Config::from_yaml(path, text)?.validate(path)?;
    let router = kthena_router::Router::start_in_cluster(cfg, ns.client().clone()).await?;
    until_routed(&router.addr.to_string(), &routed_model(ns)).await?;
    Ok(router)
}

/// The ModelServer `target` selecting the entry pods of the ModelServing `target` (port 8100,
/// plus the members of `extra`) and a ModelRoute of [`routed_model`] to it.
async fn model_server_and_route(
    ns: &TestNamespace,
    target: &str,
    extra: serde_json::Value,
) -> Result<()> {
    let mut spec = json!({
        "model": "m",
        "inferenceEngine": "vLLM",
        "workloadSelector": {"matchLabels": {"modelserving.volcano.sh/name": target}},
        "workloadPort": {"port": 8100},
    });
    json_patch::merge(&mut spec, &extra);
    let server: kthena_api::ModelServer = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelServer",
        "metadata": {"name": target, "namespace": ns.name()},
        "spec": spec,
    }))?;
    ns.api::<kthena_api::ModelServer>()
        .create(&PostParams::default(), &server)
        .await?;
    let route: kthena_api::ModelRoute = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1",
        "kind": "ModelRoute",
        "metadata": {"name": target, "namespace": ns.name()},
        "spec": {"modelName": routed_model(ns), "rules": [{"name": "default", "targetModels": [{"modelServerName": target}]}]},
    }))?;
    ns.api::<kthena_api::ModelRoute>()
        .create(&PostParams::default(), &route)
        .await?;
    Ok(())
}

/// The client-facing model name of the ModelRoute of [`cluster_router`] in `ns`.
fn routed_model(ns: &TestNamespace) -> String {
    format!("m-{}", ns.name())
}

/// Waits until the router at `addr` answers a completion of `model` with 200.
async fn until_routed(addr: &str, model: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let body = json!({"model": model, "prompt": "hi", "max_tokens": 1}).to_string();
        let req = http::Request::post(format!("http://{addr}/v1/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        // Bounded: a request queued behind another test's load must not hang the wait.
        let answer = tokio::time::timeout(Duration::from_secs(5), http().request(req)).await;
        if answer.is_ok_and(|r| r.is_ok_and(|r| r.status() == 200)) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the router never routed model {model}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn load_through_the_router_in_cluster_mode_scales_up_then_down_after_the_window() -> Result<()>
{
    let env = setup("as-router").await?;
    let ns = &env.ns;
    create_serving(ns, "llm").await?;
    let ip = entry_ip(ns, "llm").await?;
    let router = cluster_router(ns, "llm").await?;
    let addr = router.addr.to_string();
    create_policy(ns, "llm", json!({"pod": {"port": 8100}})).await?;
    // 9 requests through the router: the engine runs 1 and queues 8 ⇒ 4 replicas.
    let load = load_via(&addr, &routed_model(ns), 9);
    queue_at_least(&ip, 8.0).await?;
    let deadline = tokio::time::Instant::now() + SYNC * 2 + Duration::from_millis(1500);
    while replicas(ns, "llm").await? != 4 {
        if tokio::time::Instant::now() > deadline {
            bail!("not scaled to 4 within two sync periods of the queue rising");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The clients go away: the router cancels the upstream requests, the queue empties, and
    // after the 6 s window the target drops to 1 in one step, never back up.
    drop(load);
    let samples = sample(ns, "llm", Duration::from_secs(12)).await?;
    let first_one = samples
        .iter()
        .position(|&r| r == 1)
        .context("never scaled down")?;
    assert!(first_one >= 4, "scaled down before the window: {samples:?}");
    assert!(samples[..first_one].iter().all(|&r| r == 4), "{samples:?}");
    assert!(
        samples[first_one..].iter().all(|&r| r == 1),
        "flapping: {samples:?}"
    );
    router.shutdown().await;
    Ok(())
}
