//! The autoscaler controller on a real API server (kthena-testenv) with the ModelServing
//! controller and a simulated node: engine queues drive `spec.replicas` of a ModelServing.
//! Load goes through kthena-router in cluster mode where the issue asks for it (scale up and
//! down, prefill/decode ratio, the Prometheus source), straight to the engines elsewhere.

mod support;

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http_body_util::Full;
use kthena_api::AutoscalingPolicy;
use kthena_api::workload::{AutoscalingPolicyStatus, TargetScalingStatus};
use kthena_testenv::TestNamespace;
use serde_json::json;
use support::engines::{
    WAITING, create_policy, create_policy_of, create_serving, create_serving_of,
    create_serving_with, entry_ip, load, load_via, queue_at_least, ready_ip, replicas, role,
    role_replicas, status_where,
};
use support::prometheus::{prom_value, start_prometheus};
use support::router::{Serving, cluster_router};
use support::{Controllers, Env, Samples, WAIT, every_second, http};

/// Time between two autoscaling rounds in these tests.
const SYNC: Duration = Duration::from_secs(2);
/// Time a decision may take past two sync periods: the round's scrapes and the patch.
const SLACK: Duration = Duration::from_millis(1500);

async fn setup(prefix: &str) -> Result<Env> {
    support::setup(prefix, Controllers::Autoscaler(SYNC)).await
}

/// Polls (every 100 ms) until `read` answers `want`, failing after `within`.
async fn until<T, F, Fut>(read: F, want: T, within: Duration) -> Result<()>
where
    T: PartialEq + std::fmt::Debug,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    while read().await? != want {
        if tokio::time::Instant::now() > deadline {
            bail!("not at {want:?} within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Polls until `spec.replicas` of `name` is `want`, failing after `within`.
async fn until_replicas(ns: &TestNamespace, name: &str, want: i32, within: Duration) -> Result<()> {
    until(|| replicas(ns, name), want, within).await
}

/// The status of policy `name` once its `homogeneousStatus.desiredReplicas` is `want`, and
/// that `homogeneousStatus`.
async fn desired(
    ns: &TestNamespace,
    name: &str,
    want: i32,
) -> Result<(AutoscalingPolicyStatus, TargetScalingStatus)> {
    let st = status_where(ns, name, |st| {
        st.homogeneous_status
            .as_ref()
            .is_some_and(|h| h.desired_replicas == want)
    })
    .await?;
    let h = st
        .homogeneous_status
        .clone()
        .context("no homogeneous status")?;
    Ok((st, h))
}

/// `spec.replicas` of `name`, once a second for `d`.
async fn sample(ns: &TestNamespace, name: &str, d: Duration) -> Result<Samples<i32>> {
    every_second(d, || replicas(ns, name)).await
}

/// After the load stopped (the 6 s stabilization window of [`create_policy`]): `from` for
/// at least the window, then `to` in one step and never back up.
fn assert_one_step_down(samples: &Samples<i32>, from: i32, to: i32) -> Result<()> {
    let values = samples.values();
    let first = values
        .iter()
        .position(|&r| r == to)
        .with_context(|| format!("never scaled down: {values:?}"))?;
    assert!(first >= 4, "scaled down before the window: {values:?}");
    assert!(values[..first].iter().all(|&r| r == from), "{values:?}");
    assert!(
        values[first..].iter().all(|&r| r == to),
        "flapping: {values:?}"
    );
    Ok(())
}

/// Scaling up: the values never go down, stay within `1..=max`, reach `max` no later than
/// two sync periods (plus [`SLACK`] and one sample) after sampling started, and hold it.
fn assert_scaled_up_once_to(samples: &Samples<i32>, max: i32) -> Result<()> {
    let values = samples.values();
    assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
    assert!(values.iter().all(|r| (1..=max).contains(r)), "{values:?}");
    let reached = samples
        .first(&max)
        .with_context(|| format!("never scaled to {max}: {values:?}"))?;
    let bound = SYNC * 2 + SLACK + Duration::from_secs(1);
    assert!(reached <= bound, "{max} only at {reached:?}: {samples:?}");
    Ok(())
}

#[tokio::test]
async fn queues_scale_up_within_two_sync_periods_then_down_after_the_window() -> Result<()> {
    let env = setup("as-up").await?;
    let ns = &env.ns;
    create_serving(ns, "llm").await?;
    create_policy(ns, "llm", json!({"pod": {"port": 8100}})).await?;
    let ip = entry_ip(ns, "llm").await?;
    // Idle: 0 waiting ⇒ the minimum, 1 replica.
    let idle = sample(ns, "llm", SYNC * 2).await?.values();
    assert!(idle.iter().all(|&r| r == 1), "{idle:?}");
    // 9 requests: 1 running, 8 waiting ⇒ ceil(8 / 2) = 4 (the scale-up limit allows 1 + 4).
    let load = load(&ip, 9);
    queue_at_least(&ip, 8.0).await?;
    until_replicas(ns, "llm", 4, SYNC * 2 + SLACK).await?;
    // The status is written right after the patch: poll for it.
    let (st, h) = desired(ns, "llm-policy", 4).await?;
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
    assert_one_step_down(&samples, 4, 1)
}

#[tokio::test]
async fn a_metrics_endpoint_that_fails_or_answers_garbage_never_scales() -> Result<()> {
    let env = setup("as-bad").await?;
    let ns = &env.ns;
    create_serving(ns, "nf").await?;
    create_serving(ns, "junk").await?;
    create_serving_with(ns, "fail", &["--fault-metrics-status", "500"]).await?;
    // 500 on /metrics itself; 404 on an unknown path; JSON (not metrics text) on /v1/models.
    let sources = [
        ("fail", "/metrics"),
        ("nf", "/no-such-metrics"),
        ("junk", "/v1/models"),
    ];
    for (target, uri) in sources {
        create_policy(ns, target, json!({"pod": {"port": 8100, "uri": uri}})).await?;
    }
    // And a policy whose target does not exist.
    create_policy(ns, "ghost", json!({"pod": {"port": 8100}})).await?;
    let _a = load(&entry_ip(ns, "nf").await?, 9);
    let _b = load(&entry_ip(ns, "junk").await?, 9);
    let fail_ip = entry_ip(ns, "fail").await?;
    let _c = load(&fail_ip, 9);
    let samples = sample(ns, "nf", SYNC * 3).await?.values();
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
        assert_eq!((h.current_replicas, h.desired_replicas), (1, 0), "{name}");
        assert_eq!(h.mode, None, "{name}: no decision was made");
    }
    let st = status_where(ns, "ghost-policy", |st| !st.conditions.is_empty()).await?;
    let conditions: Vec<_> = st
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                &*c.message,
            )
        })
        .collect();
    let missing = format!("ModelServing {}/ghost not found", ns.name());
    assert_eq!(
        conditions,
        vec![
            ("Ready", "False", "ReconcileFailed", missing.as_str()),
            ("TargetFound", "False", "TargetInvalid", missing.as_str()),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_disaggregated_target_behind_the_router_keeps_the_role_ratio_at_every_sample()
-> Result<()> {
    let env = setup("as-pd").await?;
    let ns = &env.ns;
    // Prefill engines never queue (64 sequences at a time); decode engines run one.
    let roles = json!([role("prefill", 64, &[]), role("decode", 1, &[])]);
    create_serving_of(ns, "pd", roles).await?;
    let source = json!({WAITING: {"pod": {"port": 8100}}});
    create_policy_of(
        ns,
        json!({
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
        }),
    )
    .await?;
    let decode_ip = ready_ip(ns, "pd", "modelserving.volcano.sh/role=decode").await?;
    let router = cluster_router(ns, "pd", Serving::Disaggregated).await?;
    // 9 requests through the router, each prefilled (1 token) and then decoded on the one
    // decode engine: 1 running, 8 waiting ⇒ decode ceil(8 / 2) = 4; prefill (0 waiting)
    // recommends 1, raised to ceil(0.5 × 4) = 2 by the ratio.
    let load = load_via(&router.addr.to_string(), 9);
    queue_at_least(&decode_ip, 8.0).await?;
    let samples = every_second(SYNC * 2 + Duration::from_secs(5), || {
        role_replicas(ns, "pd")
    })
    .await?;
    let values = samples.values();
    assert!(
        values.iter().all(|&(p, d)| 2 * p >= d && p <= d),
        "ratio outside [0.5, 1]: {samples:?}"
    );
    assert!(values.windows(2).all(|w| w[0].1 <= w[1].1), "{values:?}");
    let reached = samples
        .first(&(2, 4))
        .with_context(|| format!("never reached prefill 2, decode 4: {values:?}"))?;
    assert!(
        reached <= SYNC * 2 + SLACK + Duration::from_secs(1),
        "{samples:?}"
    );
    assert_eq!(values.last(), Some(&(2, 4)), "{values:?}");
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
        vec![("decode".to_owned(), 4), ("prefill".to_owned(), 1)]
    );
    let ratio = d.ratio_status.context("no ratio status")?;
    assert_eq!(ratio.current_ratio.as_deref(), Some("0.5"));
    assert_eq!(d.ratio_adjusted, Some(true));
    drop(load);
    router.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_prometheus_sourced_metric_drives_the_same_scale_up_through_the_router() -> Result<()> {
    let env = setup("as-prom").await?;
    let ns = &env.ns;
    create_serving(ns, "pq").await?;
    let ip = entry_ip(ns, "pq").await?;
    let router = cluster_router(ns, "pq", Serving::Aggregated).await?;
    let prom = start_prometheus(ns.name(), &format!("{ip}:8100")).await?;
    let query = format!("sum({WAITING})");
    let source = json!({"prometheus": {"serverURL": prom.url, "query": query}});
    create_policy(ns, "pq", source).await?;
    // 9 requests through the router to the one engine: 8 waiting, as Prometheus sees it.
    let load = load_via(&router.addr.to_string(), 9);
    support::eventually("Prometheus seeing the queue", || async {
        Ok((prom_value(&prom.url, &query).await? >= 8.0).then_some(()))
    })
    .await?;
    let samples = sample(ns, "pq", SYNC * 2 + Duration::from_secs(5)).await?;
    assert_scaled_up_once_to(&samples, 4)?;
    let (_, h) = desired(ns, "pq-policy", 4).await?;
    assert_eq!(h.mode.as_deref(), Some("Stable"));
    // The router sent all 9 to the engine it knew; the new replicas got none.
    assert_eq!(prom_value(&prom.url, &query).await?, 8.0);
    drop(load);
    router.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn load_through_the_router_in_cluster_mode_scales_up_then_down_after_the_window() -> Result<()>
{
    let env = setup("as-router").await?;
    let ns = &env.ns;
    create_serving(ns, "llm").await?;
    let ip = entry_ip(ns, "llm").await?;
    let router = cluster_router(ns, "llm", Serving::Aggregated).await?;
    create_policy(ns, "llm", json!({"pod": {"port": 8100}})).await?;
    // 9 requests through the router: the engine runs 1 and queues 8 ⇒ 4 replicas.
    let load = load_via(&router.addr.to_string(), 9);
    queue_at_least(&ip, 8.0).await?;
    until_replicas(ns, "llm", 4, SYNC * 2 + SLACK).await?;
    // The clients go away: the router cancels the upstream requests, the queue empties, and
    // after the 6 s window the target drops to 1 in one step, never back up.
    drop(load);
    let samples = sample(ns, "llm", Duration::from_secs(12)).await?;
    assert_one_step_down(&samples, 4, 1)?;
    router.shutdown().await;
    Ok(())
}

/// `(cheap, dear)` replicas of the heterogeneous test.
async fn cheap_and_dear(ns: &TestNamespace) -> Result<(i32, i32)> {
    Ok((replicas(ns, "cheap").await?, replicas(ns, "dear").await?))
}

#[tokio::test]
async fn a_heterogeneous_policy_fills_the_cheapest_target_first() -> Result<()> {
    let env = setup("as-het").await?;
    let ns = &env.ns;
    create_serving(ns, "cheap").await?;
    create_serving(ns, "dear").await?;
    let source = json!({WAITING: {"pod": {"port": 8100}}});
    create_policy_of(
        ns,
        json!({
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
        }),
    )
    .await?;
    // Idle: the total goes to Σ min = 1, all of it the cheap target's minimum.
    until(|| cheap_and_dear(ns), (1, 0), WAIT).await?;
    // 8 waiting on cheap ⇒ total 4: cheap's package (1 at cost 1) first, then dear's two
    // single-replica packages (cost 10 each) before its 2-replica one (cost 20).
    let ip = entry_ip(ns, "cheap").await?;
    let _load = load(&ip, 9);
    queue_at_least(&ip, 8.0).await?;
    until(|| cheap_and_dear(ns), (2, 2), SYNC * 2 + SLACK).await?;
    let st = status_where(ns, "het-policy", |st| {
        st.heterogeneous_status
            .iter()
            .any(|s| s.desired_replicas == 2 && s.name.as_deref() == Some("dear"))
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
    let env = support::setup("as-lead", Controllers::LeaderElected(SYNC)).await?;
    let ns = &env.ns;
    create_serving(ns, "led").await?;
    create_policy(ns, "led", json!({"pod": {"port": 8100}})).await?;
    let ip = entry_ip(ns, "led").await?;
    let _load = load(&ip, 9);
    queue_at_least(&ip, 8.0).await?;
    until_replicas(ns, "led", 4, SYNC * 2 + SLACK).await
}
