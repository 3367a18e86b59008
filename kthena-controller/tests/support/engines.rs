//! ModelServings of simulated engines, AutoscalingPolicies over them, and load: the engines run
//! one sequence at a time, so concurrent requests queue (`vllm:num_requests_waiting`).

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::workload::AutoscalingPolicyStatus;
use kthena_api::{AutoscalingPolicy, ModelServing};
use kthena_testenv::TestNamespace;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::{WAIT, body_of, eventually, http};

/// The metric the tests scale on.
pub(crate) const WAITING: &str = "vllm:num_requests_waiting";

/// A role of kthena-sim engines serving model `m` on port 8100, one replica, running at most
/// `max_num_seqs` sequences (the rest wait), with more kthena-sim `flags`.
pub(crate) fn role(name: &str, max_num_seqs: u32, flags: &[&str]) -> Value {
    let mut args = vec!["--model".to_owned(), "m".to_owned()];
    args.extend(["--max-num-seqs".to_owned(), max_num_seqs.to_string()]);
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    json!({
        "name": name,
        "replicas": 1,
        "workerReplicas": 0,
        "entryTemplate": {"spec": {"containers": [{
            "name": "engine",
            "image": "kthena-sim",
            "command": ["kthena-sim"],
            "args": args,
            "ports": [{"containerPort": 8100}],
        }]}},
    })
}

/// Creates a ModelServing `name` of one serving group with `roles`.
pub(crate) async fn create_serving_of(ns: &TestNamespace, name: &str, roles: Value) -> Result<()> {
    let ms: ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name, "namespace": ns.name()},
        "spec": {"replicas": 1, "template": {"roles": roles}},
    }))?;
    ns.api::<ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    Ok(())
}

/// A one-role ModelServing whose engines run one sequence at a time.
pub(crate) async fn create_serving(ns: &TestNamespace, name: &str) -> Result<()> {
    create_serving_with(ns, name, &[]).await
}

/// [`create_serving`] with more kthena-sim flags for the engines.
pub(crate) async fn create_serving_with(
    ns: &TestNamespace,
    name: &str,
    flags: &[&str],
) -> Result<()> {
    create_serving_of(ns, name, json!([role("engine", 1, flags)])).await
}

/// Creates `policy` (an AutoscalingPolicy as JSON) with the webhook's defaults.
pub(crate) async fn create_policy_of(ns: &TestNamespace, policy: Value) -> Result<()> {
    let p: AutoscalingPolicy = serde_json::from_value(policy)?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    Ok(())
}

/// A homogeneous policy `<target>-policy` on `target`: 2 waiting requests per replica,
/// 1..=4 replicas, the webhook's default scale-up (4 instances Or 100 % per minute) and a 6 s
/// scale-down stabilization window.
pub(crate) async fn create_policy(ns: &TestNamespace, target: &str, source: Value) -> Result<()> {
    create_policy_of(
        ns,
        json!({
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
        }),
    )
    .await
}

/// `spec.replicas` of `name` (unset counts as 1).
pub(crate) async fn replicas(ns: &TestNamespace, name: &str) -> Result<i32> {
    Ok(ns
        .api::<ModelServing>()
        .get(name)
        .await?
        .spec
        .replicas
        .unwrap_or(1))
}

/// `(prefill, decode)` role replicas of `name`.
pub(crate) async fn role_replicas(ns: &TestNamespace, name: &str) -> Result<(i32, i32)> {
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

/// The IP of the first Running and Ready pod of ModelServing `name` that has every label of
/// `extra` (`k=v,...`, may be empty).
pub(crate) async fn ready_ip(ns: &TestNamespace, name: &str, extra: &str) -> Result<String> {
    let mut selector = format!("modelserving.volcano.sh/name={name}");
    if !extra.is_empty() {
        selector = format!("{selector},{extra}");
    }
    let lp = ListParams::default().labels(&selector);
    eventually(&format!("a ready pod of {name} ({extra})"), || async {
        let pods = ns.api::<Pod>().list(&lp).await?;
        Ok(pods.items.iter().find_map(|p| {
            let st = p.status.as_ref()?;
            let ready = st
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then(|| st.pod_ip.clone()).flatten()
        }))
    })
    .await
}

/// The IP of the first Running and Ready entry pod of `name`.
pub(crate) async fn entry_ip(ns: &TestNamespace, name: &str) -> Result<String> {
    ready_ip(ns, name, "").await
}

/// `n` concurrent long completions against the engine at `ip` (aborted when the set drops).
pub(crate) fn load(ip: &str, n: usize) -> JoinSet<()> {
    load_via(&format!("{ip}:8100"), n)
}

/// `n` concurrent long completions of model `m` sent to `addr` (an engine or a router),
/// aborted when the set drops.
pub(crate) fn load_via(addr: &str, n: usize) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for _ in 0..n {
        let url = format!("http://{addr}/v1/completions");
        set.spawn(async move {
            let body = json!({"model": "m", "prompt": "hello", "max_tokens": 20000}).to_string();
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

/// The engine's own `vllm:num_requests_waiting`.
pub(crate) async fn waiting(ip: &str) -> Result<f64> {
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
pub(crate) async fn queue_at_least(ip: &str, n: f64) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while waiting(ip).await? < n {
        if tokio::time::Instant::now() > deadline {
            bail!("the queue never reached {n}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Polls the status of policy `name` until `ok` holds.
pub(crate) async fn status_where(
    ns: &TestNamespace,
    name: &str,
    ok: impl Fn(&AutoscalingPolicyStatus) -> bool,
) -> Result<AutoscalingPolicyStatus> {
    eventually(&format!("the status of {name}"), || async {
        let st = ns.api::<AutoscalingPolicy>().get(name).await?.status;
        Ok(st.filter(|s| ok(s)))
    })
    .await
}
