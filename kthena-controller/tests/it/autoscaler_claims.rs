//! Two AutoscalingPolicies on one ModelServing, on a real API server: only the older one is
//! applied, and the other one's status says why.

use std::time::Duration;

use anyhow::{Result, bail};
use kthena_api::AutoscalingPolicy;
use kthena_api::workload::AutoscalingPolicyStatus;
use kthena_controller::autoscaler::{AutoscalerConfig, run_autoscaler};
use kthena_testenv::TestNamespace;
use kube::api::PostParams;
use serde_json::json;
use tokio::task::JoinSet;

async fn create_policy(ns: &TestNamespace, name: &str, min: i32) -> Result<()> {
    let p: AutoscalingPolicy = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "AutoscalingPolicy",
        "metadata": {"name": name, "namespace": ns.name()},
        "spec": {
            "metrics": [{"name": "vllm:num_requests_waiting", "targetValue": "2"}],
            "homogeneousTarget": {
                "minReplicas": min,
                "maxReplicas": 4,
                "target": {"targetRef": {"kind": "ModelServing", "name": "ms"}},
            },
        },
    }))?;
    ns.api::<AutoscalingPolicy>()
        .create(&PostParams::default(), &p.with_defaults())
        .await?;
    Ok(())
}

/// The `Ready` condition of `name` once it has one: `(status, reason, message)`.
async fn ready(ns: &TestNamespace, name: &str) -> Result<(String, String, String)> {
    for _ in 0..300 {
        let st: Option<AutoscalingPolicyStatus> =
            ns.api::<AutoscalingPolicy>().get(name).await?.status;
        let cond = st
            .iter()
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == "Ready");
        if let Some(c) = cond {
            return Ok((c.status.clone(), c.reason.clone(), c.message.clone()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{name} never got a Ready condition")
}

/// Regression: two policies on one ModelServing (minReplicas 1 and 3) scaled it 3 → 1 → 3
/// every sync period, and both said `Ready=True`.
#[tokio::test]
async fn only_the_older_of_two_policies_on_one_target_is_applied() -> Result<()> {
    let ns = kthena_testenv::namespace("as-claims").await?;
    // Created in the same second or not, `asp1` is the older: creation time, then name.
    create_policy(&ns, "asp1", 1).await?;
    create_policy(&ns, "asp3", 3).await?;
    let mut tasks = JoinSet::new();
    let config = AutoscalerConfig {
        namespace: Some(ns.name().to_owned()),
        sync_period: Duration::from_millis(500),
        ..AutoscalerConfig::default()
    };
    tasks.spawn(run_autoscaler(
        ns.client().clone(),
        config,
        std::future::pending(),
    ));
    let newer = ready(&ns, "asp3").await?;
    assert_eq!(
        newer,
        (
            "False".to_owned(),
            "AmbiguousTarget".to_owned(),
            format!(
                "ModelServing {0}/ms is already scaled by AutoscalingPolicy {0}/asp1, the older \
                 of the two; this policy is not applied while both target it",
                ns.name()
            )
        )
    );
    // The older one is applied: here its target does not exist.
    let older = ready(&ns, "asp1").await?;
    assert_eq!(older.1, "ReconcileFailed", "{older:?}");
    assert!(older.2.ends_with("/ms not found"), "{older:?}");
    Ok(())
}
