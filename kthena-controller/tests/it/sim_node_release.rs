//! The controller as the release runs it on a laptop: a Deployment of Go Kthena's
//! controller-manager image, turned into a pod by kube-controller-manager, runs this
//! crate's `kthena-controller` binary as a process of the simulated node, authenticated as
//! its service account; it becomes Ready through its readiness probe, reconciles a
//! ModelServing into engine pods the same node serves, and goes with its Deployment.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kthena_api::ModelServing;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::chart_pods::process_node;
use crate::ms_support::{available_in, create_example_in, eventually};

const NS: &str = "kthena-system";

/// Upper bound for kube-controller-manager and the node to react.
const WAIT: Duration = Duration::from_secs(30);

fn deployment() -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "kthena-controller-manager"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/component": "kthena-controller-manager"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/component": "kthena-controller-manager"}},
                "spec": {
                    "serviceAccountName": "kthena-controller-manager",
                    "containers": [{
                        "name": "kthena-controller-manager",
                        "image": "ghcr.io/volcano-sh/kthena-controller-manager:v1.0.0",
                        // Bound on the pod IP: nothing else on this machine collides with it.
                        "args": ["--enable-webhook=false", "--healthz-bind-address=$(POD_IP):8081"],
                        "env": [
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
                        ],
                        "ports": [{"containerPort": 8081, "name": "healthz"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "healthz"}}
                    }]
                }
            }
        }
    }))?)
}

/// The namespace, the service account and its binding to `cluster-admin` (the chart's RBAC
/// is narrower; this test is about running the pod).
async fn setup(client: &kube::Client) -> Result<()> {
    let pp = PostParams::default();
    Api::<Namespace>::all(client.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await?;
    Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "kthena-controller-manager"}}))?,
        )
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&pp, &serde_json::from_value(json!({
            "metadata": {"name": "kthena-controller-manager"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "kthena-controller-manager", "namespace": NS}]
        }))?)
        .await?;
    Ok(())
}

async fn controller_pods(pods: &Api<Pod>) -> Result<Vec<Pod>> {
    let lp = ListParams::default().labels("app.kubernetes.io/component=kthena-controller-manager");
    Ok(pods.list(&lp).await?.items)
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn the_controller_deployment_runs_as_a_process_and_reconciles() -> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    plane.start_controller_manager().await?;
    let client = plane.client().await?;
    setup(&client).await?;
    let pods_dir = tempfile::tempdir()?;
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_kthena-controller"))
        .parent()
        .context("binary directory")?
        .to_owned();
    let node = process_node(&plane, bin_dir, pods_dir.path()).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments
        .create(&PostParams::default(), &deployment()?)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = eventually("the controller pod Ready", || async {
        let ps = controller_pods(&pods).await?;
        Ok((ps.len() == 1 && ready(&ps[0])).then(|| ps[0].clone()))
    })
    .await?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let log = pods_dir
        .path()
        .join(format!("{NS}_{name}_{uid}/kthena-controller-manager.log"));

    // The process reconciles with its service account's token: a ModelServing gets its pods,
    // which the same node serves as engines.
    let serving: Api<ModelServing> = Api::namespaced(client.clone(), NS);
    create_example_in(&serving, NS, "sample.yaml").await?;
    available_in(&serving, "sample", 1)
        .await
        .with_context(|| std::fs::read_to_string(&log).unwrap_or_default())?;

    deployments
        .delete("kthena-controller-manager", &DeleteParams::default())
        .await?;
    tokio::time::timeout(
        WAIT,
        await_condition(
            pods.clone(),
            &name,
            kube::runtime::conditions::is_deleted(&uid),
        ),
    )
    .await
    .context("the controller pod removed")??;
    eventually("the controller process gone", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let healthz = tokio::net::TcpStream::connect(pod_ip(&pod)?).await;
        Ok(healthz.is_err().then_some(text))
    })
    .await?;
    node.stop().await;
    Ok(())
}

fn pod_ip(pod: &Pod) -> Result<std::net::SocketAddr> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("no podIP")?;
    Ok(std::net::SocketAddr::new(ip.parse()?, 8081))
}
