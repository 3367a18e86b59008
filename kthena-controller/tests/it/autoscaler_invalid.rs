//! Metric values that parse but mean nothing (NaN, ±Inf, negative, 1e300), and Prometheus
//! servers that fail, on a real API server: the autoscaler keeps the target's replicas, and
//! says what it skipped (pod or server, metric, value or cause) in the policy's `Ready`
//! condition and, for values, in a Warning event.
//!
//! No ModelServing controller runs: the target's one entry pod is created here and marked
//! Running and Ready at a loopback address of this file's own (127.39.0.x), where a small
//! HTTP server answers with whatever exposition the test sets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kthena_api::workload::AutoscalingPolicyStatus;
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_controller::autoscaler::{AutoscalerConfig, run_autoscaler};
use kthena_testenv::TestNamespace;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinSet;

/// Time between two autoscaling rounds in these tests.
const SYNC: Duration = Duration::from_secs(1);
/// Upper bound for things that have no deadline of their own (a timeout, not a latency).
const WAIT: Duration = Duration::from_secs(30);
const WAITING: &str = "vllm:num_requests_waiting";

/// An HTTP server on `addr` answering every request with 200 and the current `body`.
struct Server {
    body: Arc<Mutex<String>>,
    _task: JoinSet<()>,
}

impl Server {
    async fn start(addr: &str, body: &str) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let body = Arc::new(Mutex::new(body.to_owned()));
        let shared = Arc::clone(&body);
        let mut task = JoinSet::new();
        task.spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = shared.lock().map(|b| b.clone()).unwrap_or_default();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        Ok(Self { body, _task: task })
    }

    fn set(&self, body: &str) {
        if let Ok(mut b) = self.body.lock() {
            *b = body.to_owned();
        }
    }
}

/// The exposition of an engine with `value` requests waiting.
fn exposition(value: &str) -> String {
    format!("# TYPE {WAITING} gauge\n{WAITING}{{model_name=\"m\"}} {value}\n")
}

/// A Prometheus `/api/v1/query` answer: one sample of `value`.
fn promql(value: &str) -> String {
    json!({"status": "success", "data": {"resultType": "vector",
           "result": [{"metric": {}, "value": [1.0, value]}]}})
    .to_string()
}

/// A ModelServing `name` with `replicas: 2` (nothing reconciles it) and, when `ip` is given,
/// its entry pod, Running and Ready at `ip`.
async fn target(ns: &TestNamespace, name: &str, ip: Option<&str>) -> Result<()> {
    let ms: ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name},
        "spec": {"replicas": 2, "template": {"roles": [{"name": "engine", "replicas": 1,
            "workerReplicas": 0,
            "entryTemplate": {"spec": {"containers": [{"name": "e", "image": "vllm"}]}}}]}},
    }))?;
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    let Some(ip) = ip else { return Ok(()) };
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("{name}-0"), "labels": {
            "modelserving.volcano.sh/name": name, "modelserving.volcano.sh/entry": "true"}},
        "spec": {"containers": [{"name": "e", "image": "vllm"}]},
    }))?;
    let pods = ns.api::<Pod>();
    pods.create(&PostParams::default(), &pod).await?;
    let status = json!({"status": {"phase": "Running", "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(
        &format!("{name}-0"),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await?;
    Ok(())
}

/// A homogeneous policy `<target>-policy`: 2 waiting requests per replica, 1..=4 replicas,
/// the metric from `source`.
async fn policy(ns: &TestNamespace, target: &str, source: Value) -> Result<()> {
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": format!("{target}-policy")},
        "spec": {
            "metrics": [{"name": WAITING, "targetValue": "2"}],
            "homogeneousTarget": {"minReplicas": 1, "maxReplicas": 4,
                "target": {"targetRef": {"kind": "ModelServing", "name": target},
                           "metricSources": {WAITING: source}}},
        },
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    Ok(())
}

fn start_autoscaler(ns: &TestNamespace) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let config = AutoscalerConfig {
        namespace: Some(ns.name().to_owned()),
        sync_period: SYNC,
        ..AutoscalerConfig::default()
    };
    tasks.spawn(run_autoscaler(
        ns.client().clone(),
        config,
        std::future::pending(),
    ));
    tasks
}

async fn replicas(ns: &TestNamespace, name: &str) -> Result<Option<i32>> {
    Ok(ns.api::<ModelServing>().get(name).await?.spec.replicas)
}

/// The `Ready` condition's `(status, reason, message)` once `ok` holds for it, and the time
/// that took.
async fn ready_where(
    ns: &TestNamespace,
    policy: &str,
    ok: impl Fn(&str, &str, &str) -> bool,
) -> Result<((String, String, String), Duration)> {
    let start = tokio::time::Instant::now();
    loop {
        let st: Option<AutoscalingPolicyStatus> =
            ns.api::<AutoscalingPolicy>().get(policy).await?.status;
        let ready = st
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == "Ready")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        if let Some(r) = ready.filter(|(s, r, m)| ok(s, r, m)) {
            return Ok((r, start.elapsed()));
        }
        if start.elapsed() > WAIT {
            bail!("the Ready condition of {policy} never matched");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for a Warning event `InvalidMetricValue` on `policy` whose note contains `text`.
async fn warning_event(ns: &TestNamespace, policy: &str, text: &str) -> Result<Event> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let events = ns.api::<Event>().list(&Default::default()).await?;
        if let Some(e) = events.items.into_iter().find(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("InvalidMetricValue")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(policy)
                && e.note.as_deref().is_some_and(|n| n.contains(text))
        }) {
            return Ok(e);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("no InvalidMetricValue event on {policy} with {text:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn pod_values_that_mean_nothing_never_scale_and_are_reported() -> Result<()> {
    let ns = kthena_testenv::namespace("as-nan").await?;
    let ip = "127.39.0.2";
    let server = Server::start(&format!("{ip}:18139"), &exposition("NaN")).await?;
    target(&ns, "llm", Some(ip)).await?;
    policy(&ns, "llm", json!({"pod": {"port": 18139}})).await?;
    let _autoscaler = start_autoscaler(&ns);
    let pod = format!("pod {}/llm-0 metric {WAITING}", ns.name());
    // NaN ceils to 0 (the minimum, 1) and +Inf saturates (the maximum, 4): both keep 2 here.
    let cases = [
        ("NaN", "value NaN is not a number"),
        ("+Inf", "value +Inf is infinite"),
        ("-Inf", "value -Inf is infinite"),
        ("-1", "value -1 is negative"),
        (
            "1e300",
            "value 1e300 is above the largest usable value 1e15",
        ),
    ];
    for (value, said) in cases {
        server.set(&exposition(value));
        let ((_, reason, message), took) = ready_where(&ns, "llm-policy", |s, _, m| {
            s == "False" && m.contains(said)
        })
        .await?;
        assert_eq!(reason, "InvalidMetricValue", "{value}");
        assert!(message.starts_with(&pod), "{value}: {message}");
        assert!(
            message.ends_with("sample skipped; no metric value this round; replicas kept"),
            "{value}: {message}"
        );
        eprintln!("{value}: in the status after {} ms", took.as_millis());
        assert!(took < SYNC * 3, "{value}: {took:?}");
        if value == "NaN" {
            // The recorder folds later events of the same policy and pod into this one's
            // series (`kube::runtime::events`): the note keeps the first value.
            let e = warning_event(&ns, "llm-policy", said).await?;
            let related = e.related.as_ref().and_then(|r| r.name.as_deref());
            assert_eq!(related, Some("llm-0"));
            assert!(e.note.is_some_and(|n| n.starts_with(&pod)));
        }
        assert_eq!(replicas(&ns, "llm").await?, Some(2), "{value}");
    }
    // No decision was ever made: no desiredReplicas.
    let st = ns
        .api::<AutoscalingPolicy>()
        .get("llm-policy")
        .await?
        .status;
    let h = st.and_then(|s| s.homogeneous_status).context("no status")?;
    assert_eq!((h.current_replicas, h.desired_replicas), (2, None));
    // A usable value again: 8 waiting over a target of 2 ⇒ 4 replicas, and Ready says so.
    server.set(&exposition("8"));
    let ((status, reason, message), _) =
        ready_where(&ns, "llm-policy", |s, _, _| s == "True").await?;
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        (
            "True",
            "Reconciled",
            "homogeneous autoscaling policy reconciled"
        )
    );
    assert_eq!(replicas(&ns, "llm").await?, Some(4));
    Ok(())
}

#[tokio::test]
async fn prometheus_values_that_mean_nothing_and_unreachable_servers_are_reported() -> Result<()> {
    let ns = kthena_testenv::namespace("as-prom-nan").await?;
    let addr = "127.39.0.3:19139";
    let prom = Server::start(addr, &promql("NaN")).await?;
    target(&ns, "nan", None).await?;
    target(&ns, "down", None).await?;
    let query = |url: &str| json!({"prometheus": {"serverURL": url, "query": WAITING}});
    policy(&ns, "nan", query(&format!("http://{addr}"))).await?;
    // Nothing listens on 127.39.0.4.
    policy(&ns, "down", query("http://127.39.0.4:19139")).await?;
    let _autoscaler = start_autoscaler(&ns);
    let said = format!("metric {WAITING} from Prometheus http://{addr}: value NaN is not a number");
    let ((_, reason, _), took) = ready_where(&ns, "nan-policy", |s, _, m| {
        s == "False" && m.contains(&said)
    })
    .await?;
    assert_eq!(reason, "InvalidMetricValue");
    eprintln!(
        "Prometheus NaN: in the status after {} ms",
        took.as_millis()
    );
    warning_event(&ns, "nan-policy", &said).await?;
    let ((_, reason, message), _) = ready_where(&ns, "down-policy", |s, _, m| {
        s == "False" && m.contains("Connection refused")
    })
    .await?;
    assert_eq!(reason, "MetricUnavailable");
    assert!(
        message.starts_with(&format!(
            "metric {WAITING} from Prometheus http://127.39.0.4:19139: client error (Connect)"
        )),
        "{message}"
    );
    for name in ["nan", "down"] {
        assert_eq!(replicas(&ns, name).await?, Some(2), "{name}");
    }
    prom.set(&promql("1e300"));
    ready_where(&ns, "nan-policy", |s, _, m| {
        s == "False" && m.contains("value 1e300 is above the largest usable value 1e15")
    })
    .await?;
    assert_eq!(replicas(&ns, "nan").await?, Some(2));
    Ok(())
}
