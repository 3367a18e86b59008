//! The ModelServing controller while the API server restarts: on a control plane of its own,
//! so stopping kube-apiserver disturbs no other test of this binary.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Namespace;
use kthena_api::ModelServing;
use kthena_controller::serving::{Config, run};
use kthena_sim::node::{NodeConfig, SimNode};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::task::JoinSet;

use crate::ms_support::{available_in, create_example_in};

/// Regression: after a restart every watch resumes with `410 Expired` and re-lists; each of
/// those errors paused all of the controller's watches with kube-runtime's default back-off
/// (up to 30 s, doubled by jitter), so a change made after the restart waited about two
/// minutes. Now it converges within the back-off of a few seconds.
#[tokio::test]
async fn a_change_after_an_api_server_restart_converges_within_seconds() -> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    let client = plane.client().await?;
    let ns = "ctl-restart";
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let config = Config {
        namespace: Some(ns.to_owned()),
        workers: 2,
        ..Config::default()
    };
    let mut tasks = JoinSet::new();
    tasks.spawn(run(client.clone(), config, std::future::pending()));
    let node_config = NodeConfig {
        namespace: Some(ns.to_owned()),
        health_interval: Duration::from_millis(100),
        ..NodeConfig::default()
    };
    let _node = SimNode::start(client.clone(), node_config);
    let api = Api::<ModelServing>::namespaced(client, ns);
    create_example_in(&api, ns, "sample.yaml").await?;
    available_in(&api, "sample", 1).await?;

    plane.stop_apiserver().await?;
    // Long enough for the watches to fail and back off several times.
    tokio::time::sleep(Duration::from_secs(10)).await;
    plane.start_apiserver().await?;
    api.patch(
        "sample",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    let started = tokio::time::Instant::now();
    available_in(&api, "sample", 2).await?;
    let took = started.elapsed();
    eprintln!("converged {took:?} after the restart");
    // Pods start in about a second on the simulated node; the old back-off took minutes.
    assert!(took < Duration::from_secs(45), "took {took:?}");
    Ok(())
}
