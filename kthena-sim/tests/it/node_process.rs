//! The simulated node runs the release's own pods as local processes: a pod whose image is
//! one of ours runs the matching binary with the pod's args (`$(VAR)` expanded), its
//! environment (values, ConfigMap and Secret keys, the downward API), its ConfigMap volume
//! and the service account's token; the readiness probe makes it Ready. With
//! kube-controller-manager, a Deployment of it becomes a Ready pod, and deleting the
//! Deployment removes the pod and the process.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use kthena_sim::node::{ApiServer, NodeConfig, ProcessConfig, SimNode};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use crate::common;

/// Upper bound for the node and the controllers to react (a timeout, not a latency).
const WAIT: Duration = Duration::from_secs(30);

/// A word-level tokenizer: `hello` is 1, `world` is 2.
const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}"#;

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_kthena-sim"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

async fn node(
    client: Client,
    kubeconfig: &Path,
    pods_dir: &Path,
    namespace: &str,
) -> Result<SimNode> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(SimNode::start(
        client,
        NodeConfig {
            namespace: Some(namespace.to_owned()),
            health_interval: Duration::from_millis(100),
            processes: Some(ProcessConfig {
                bin_dir: bin_dir(),
                pods_dir: pods_dir.to_owned(),
                api_server: ApiServer::from_kube_config(&config),
            }),
            ..NodeConfig::default()
        },
    ))
}

/// The pod template: kthena-sim from its image, bound on the pod IP, its model from a
/// ConfigMap key, its tokenizer from a ConfigMap volume.
fn template(sa: &str) -> serde_json::Value {
    json!({
        "serviceAccountName": sa,
        "containers": [{
            "name": "sim",
            "image": "ghcr.io/volcano-sh/kthena-sim:v1.0.0",
            "args": ["--host", "$(POD_IP)", "--port", "8123", "--model", "$(MODEL)",
                     "--tokenizer=/etc/sim/tokenizer.json", "--time-scale", "100"],
            "env": [
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "sim-config", "key": "model"}}},
                {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sim-secret", "key": "password"}}},
                {"name": "REDIS_HOST", "valueFrom": {"configMapKeyRef": {"name": "redis-config", "key": "REDIS_HOST", "optional": true}}},
                {"name": "GREETING", "value": "hello $(POD_NAMESPACE) $$(POD_IP)"}
            ],
            "ports": [{"containerPort": 8123, "name": "http"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/sim"}]
        }],
        "volumes": [{"name": "config", "configMap": {"name": "sim-config",
            "items": [{"key": "tokenizer", "path": "tokenizer.json"}]}}]
    })
}

async fn create_sources(client: &Client, ns: &str, sa: bool) -> Result<()> {
    let pp = PostParams::default();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    maps.create(
        &pp,
        &serde_json::from_value(json!({
            "metadata": {"name": "sim-config"},
            "data": {"model": "proc-model", "tokenizer": TOKENIZER}
        }))?,
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "sim-secret"}, "stringData": {"password": "s3cret"}
            }))?,
        )
        .await?;
    if sa {
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        sas.create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "sim"}}))?,
        )
        .await?;
    }
    Ok(())
}

fn is_ready() -> impl Condition<Pod> {
    |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }
}

fn pod_ip(pod: &Pod) -> Result<IpAddr> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("no podIP")?;
    Ok(ip.parse()?)
}

/// The PID whose working directory is `root` (the node runs each pod's process there).
fn pid_in(root: &Path) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read_link(e.path().join("cwd")).ok()? == root).then_some(pid)
    })
}

fn environ(pid: u32) -> Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect())
}

#[tokio::test]
async fn a_pod_of_our_image_runs_the_local_binary_with_its_env_volumes_and_token() -> Result<()> {
    let ns = kthena_testenv::namespace("proc").await?;
    let client = ns.client().clone();
    create_sources(&client, ns.name(), true).await?;
    let pods_dir = tempfile::tempdir()?;
    let env = kthena_testenv::TestEnv::get().await?;
    let node = node(client.clone(), env.kubeconfig(), pods_dir.path(), ns.name()).await?;
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sim-0"}, "spec": template("sim")
    }))?;
    let pod = pods.create(&PostParams::default(), &pod).await?;
    let uid = pod.uid().context("uid")?;
    let ready = tokio::time::timeout(WAIT, await_condition(pods.clone(), "sim-0", is_ready()))
        .await
        .context("pod sim-0 Ready")??
        .context("pod gone")?;
    let ip = pod_ip(&ready)?;
    assert_ne!(
        ip,
        IpAddr::from([127, 0, 0, 1]),
        "a loopback address of its own"
    );

    // Bound on $(POD_IP), serving $(MODEL) from the ConfigMap.
    let models = common::get_json(&format!("http://{ip}:8123/v1/models")).await;
    assert_eq!(models["data"][0]["id"], "proc-model");
    // The tokenizer from the ConfigMap volume, through the rewritten mount path.
    let (status, tokens) = common::post_json(
        &format!("http://{ip}:8123/tokenize"),
        &json!({"model": "proc-model", "prompt": "hello world"}),
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["tokens"], json!([1, 2]));

    let dir = pods_dir.path().join(format!("{}_sim-0_{uid}", ns.name()));
    let root = dir.join("root");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/sim/tokenizer.json"))?,
        TOKENIZER
    );
    let pid = pid_in(&root).context("no process runs in the pod's root")?;
    let vars = environ(pid)?;
    let has = |v: &str| vars.iter().any(|x| x == v);
    assert!(has("REDIS_PASSWORD=s3cret"), "{vars:?}");
    assert!(has(&format!("POD_NAMESPACE={}", ns.name())), "{vars:?}");
    assert!(
        has(&format!("GREETING=hello {} $(POD_IP)", ns.name())),
        "{vars:?}"
    );
    assert!(has(&format!("POD_IP={ip}")), "{vars:?}");
    assert!(
        has(&format!("KUBECONFIG={}", dir.join("kubeconfig").display())),
        "{vars:?}"
    );
    assert!(
        has(&format!("KTHENA_POD_ROOT={}", root.display())),
        "{vars:?}"
    );
    assert!(
        !vars.iter().any(|v| v.starts_with("REDIS_HOST=")),
        "optional and missing: unset"
    );
    assert!(dir.join("sim.log").is_file());

    // The kubeconfig authenticates as the pod's service account.
    let kc = kube::config::Kubeconfig::read_from(dir.join("kubeconfig"))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let as_pod = Client::try_from(config)?;
    let err = Api::<Secret>::namespaced(as_pod, ns.name())
        .get("sim-secret")
        .await
        .expect_err("the service account has no RBAC to read Secrets");
    let kube::Error::Api(status) = err else {
        anyhow::bail!("not an API error: {err}")
    };
    assert_eq!(status.code, 403);
    assert!(
        status
            .message
            .contains(&format!("system:serviceaccount:{}:sim", ns.name())),
        "{}",
        status.message
    );

    // Deleting the pod stops the process and removes the pod.
    pods.delete("sim-0", &DeleteParams::default()).await?;
    tokio::time::timeout(
        WAIT,
        await_condition(
            pods.clone(),
            "sim-0",
            kube::runtime::conditions::is_deleted(&uid),
        ),
    )
    .await
    .context("pod sim-0 removed")??;
    // A pod without a nodeName is removed at once by the API server; the process gets
    // SIGTERM when the node sees it go.
    process_gone(&root, pid).await?;
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_deployment_of_our_image_becomes_a_ready_pod_and_goes_with_it() -> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    plane.start_controller_manager().await?;
    let client = plane.client().await?;
    let ns = "release";
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    create_sources(&client, ns, false).await?;
    // The serviceaccount controller makes the namespace's `default` ServiceAccount.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    tokio::time::timeout(
        WAIT,
        await_condition(sas, "default", |s: Option<&ServiceAccount>| s.is_some()),
    )
    .await
    .context("default ServiceAccount")??;
    let pods_dir = tempfile::tempdir()?;
    let node = node(client.clone(), plane.kubeconfig(), pods_dir.path(), ns).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "metadata": {"name": "sim"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "sim"}},
                "template": {"metadata": {"labels": {"app": "sim"}}, "spec": template("default")}
            }
        }))?)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels("app=sim");
    let pod = wait_list(&pods, &lp, |ps| {
        ps.len() == 1 && ps.iter().all(|p| is_ready().matches_object(Some(p)))
    })
    .await
    .context("the Deployment's pod Ready")?
    .remove(0);
    let ip = pod_ip(&pod)?;
    let models = common::get_json(&format!("http://{ip}:8123/v1/models")).await;
    assert_eq!(models["data"][0]["id"], "proc-model");
    let root = pods_dir
        .path()
        .join(format!(
            "{ns}_{}_{}",
            pod.name_any(),
            pod.uid().unwrap_or_default()
        ))
        .join("root");
    let pid = pid_in(&root).context("no process runs in the pod's root")?;

    deployments.delete("sim", &DeleteParams::default()).await?;
    wait_list(&pods, &lp, Vec::is_empty)
        .await
        .context("the pods removed")?;
    process_gone(&root, pid).await?;
    assert!(
        tokio::net::TcpStream::connect((ip, 8123)).await.is_err(),
        "nothing listens on the pod's port"
    );
    node.stop().await;
    Ok(())
}

/// Waits (up to [`WAIT`]) until no process runs in `root`.
async fn process_gone(root: &Path, pid: u32) -> Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while pid_in(root).is_some() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "process {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Polls the pods of `lp` until `done` holds (every 100 ms, up to [`WAIT`]).
async fn wait_list(
    api: &Api<Pod>,
    lp: &ListParams,
    done: impl Fn(&Vec<Pod>) -> bool,
) -> Result<Vec<Pod>> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let items = api.list(lp).await?.items;
        if done(&items) {
            return Ok(items);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out; last: {} pods",
            items.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
