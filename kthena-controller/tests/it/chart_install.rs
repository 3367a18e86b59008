//! The chart on a real API server (a control plane of its own per test: the release's
//! cluster-scoped objects and webhooks must not meet the other tests): `helm install` with
//! every object accepted, `helm upgrade` with changed values, then our binaries run with
//! exactly the args and environment of the installed Deployments (read back from the API
//! server), as their ServiceAccounts: the controller-manager becomes healthy and writes its
//! CA into its webhooks, the router becomes ready and routes a chat completion to a
//! kthena-sim engine through a ModelServer and ModelRoute admitted by the webhook; `helm
//! uninstall` leaves no object of the release. Also Go Kthena's own chart, installed with
//! our image names, starts our binaries, which become ready.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kthena_api::{ModelRoute, ModelServer};
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::ControlPlane;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::chart_pods::{
    Proc, deployment, http, https_get, resolve_env, router_bin, service_account_kubeconfig,
    wait_until,
};
use crate::chart_support::{NAMESPACE, RELEASE, chart, free_port, go_chart, helm, parse_docs};

/// The two tests start controller-managers on Go's fixed webhook port 8443: one at a time.
pub(crate) static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Upper bound for a process to become ready (a timeout, not a measured latency).
const READY: Duration = Duration::from_secs(60);

/// The router's ports as chart values (free ports: the binaries bind all interfaces).
pub(crate) struct Ports {
    pub(crate) router: u16,
    metrics: u16,
    debug: u16,
    webhook: u16,
}

impl Ports {
    pub(crate) fn free() -> Result<Self> {
        Ok(Self {
            router: free_port()?,
            metrics: free_port()?,
            debug: free_port()?,
            webhook: free_port()?,
        })
    }

    pub(crate) fn sets(&self) -> Vec<String> {
        let r = "networking.kthenaRouter";
        vec![
            format!("{r}.port={}", self.router),
            format!("{r}.metrics.port={}", self.metrics),
            format!("{r}.debugPort={}", self.debug),
            format!("{r}.webhook.port={}", self.webhook),
        ]
    }
}

/// Runs helm against `plane` with `args` and `--set` of each of `sets`.
pub(crate) fn helm_on(plane: &ControlPlane, args: &[&str], sets: &[String]) -> Result<String> {
    let kc = plane.kubeconfig().to_str().context("kubeconfig path")?;
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--namespace", NAMESPACE, "--kubeconfig", kc]);
    for set in sets {
        all.extend(["--set", set.as_str()]);
    }
    helm(&all)
}

/// `kubectl get -f FILE -o name` of the release's manifest: the objects that exist.
fn existing(plane: &ControlPlane, manifest: &Path) -> Result<Vec<String>> {
    let out = plane
        .kubectl()
        .args(["get", "--ignore-not-found", "-o", "name", "-f"])
        .arg(manifest)
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(str::to_owned)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_upgrade_run_and_uninstall() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    let ports = Ports::free()?;
    let chart = chart();
    let chart = chart.to_str().context("chart path")?;
    helm_on(
        &plane,
        &["install", RELEASE, chart, "--create-namespace"],
        &ports.sets(),
    )?;

    // Every object of the release was accepted: the manifest's objects all exist.
    let dir = tempfile::tempdir()?;
    let manifest = dir.path().join("manifest.yaml");
    let text = helm_on(&plane, &["get", "manifest", RELEASE], &[])?;
    std::fs::write(&manifest, &text)?;
    let docs = parse_docs(&text)?;
    let mut kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount",
            "ValidatingWebhookConfiguration",
        ]
    );
    assert_eq!(existing(&plane, &manifest)?.len(), docs.len());

    // An upgrade with changed values reaches the Deployments.
    let mut sets = ports.sets();
    sets.push("networking.kthenaRouter.sessionBoost.enabled=true".into());
    sets.push("workload.controllerManager.replicas=2".into());
    helm_on(&plane, &["upgrade", RELEASE, chart], &sets)?;
    let status: serde_json::Value =
        serde_json::from_str(&helm_on(&plane, &["status", RELEASE, "-o", "json"], &[])?)?;
    assert_eq!(status["version"], 2);
    let (cm, _) = deployment(&client, NAMESPACE, "kthena-controller-manager").await?;
    assert_eq!(cm.spec.replicas, Some(2));
    let (_, router) = deployment(&client, NAMESPACE, "kthena-router").await?;
    let boost = router
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "ENABLE_SESSION_BOOST");
    assert_eq!(boost.and_then(|e| e.value.as_deref()), Some("true"));

    // Redis as Go's docs configure it: the router reads REDIS_HOST and REDIS_PORT from it.
    let redis: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "redis-config"},
        "data": {"REDIS_HOST": "127.0.0.1", "REDIS_PORT": "6379"},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &redis)
        .await?;
    run_release(&plane, &ports, dir.path(), true).await?;

    helm_on(&plane, &["uninstall", RELEASE], &[])?;
    assert_eq!(existing(&plane, &manifest)?, Vec::<String>::new());
    Ok(())
}

/// Go Kthena's chart with only our image names (and free router ports) set: our binaries
/// start with the args and env its Deployments carry, and become ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_chart_with_our_images_starts_our_binaries() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = ControlPlane::start().await?;
    let ports = Ports::free()?;
    let mut sets = ports.sets();
    let version = crate::chart_support::APP_VERSION;
    sets.extend([
        "networking.kthenaRouter.image.repository=kthena-rs/kthena-router".to_owned(),
        format!("networking.kthenaRouter.image.tag={version}"),
        "workload.controllerManager.image.repository=kthena-rs/kthena-controller-manager"
            .to_owned(),
        format!("workload.controllerManager.image.tag={version}"),
    ]);
    let go = go_chart();
    let go = go.to_str().context("chart path")?;
    // The cluster keeps our CRDs (Helm 4 server-side applies a chart's CRDs; Go's differ).
    helm_on(
        &plane,
        &["install", RELEASE, go, "--create-namespace", "--skip-crds"],
        &sets,
    )?;
    let dir = tempfile::tempdir()?;
    // Readiness only: Go's chart registers the router kinds' webhook at the router's own
    // Service (`kthena-router-validating-webhook`), which our router does not serve.
    run_release(&plane, &ports, dir.path(), false).await
}

/// Runs the installed controller-manager and router as their pods would run, waits for both
/// to be ready, and with `route`, sends a chat completion through the router to a simulated
/// engine.
async fn run_release(plane: &ControlPlane, ports: &Ports, dir: &Path, route: bool) -> Result<()> {
    let client = plane.client().await?;
    let mut controller = start_pod(plane, &client, "kthena-controller-manager", dir).await?;
    let secrets = &Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    let ca = &std::sync::Mutex::new(String::new());
    wait_until(
        &mut controller,
        READY,
        "controller-manager /healthz over TLS",
        || async move {
            let Ok(Some(secret)) = secrets
                .get_opt("kthena-controller-manager-webhook-certs")
                .await
            else {
                return false;
            };
            let pem = secret.data.and_then(|d| {
                d.get("ca.crt")
                    .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            });
            let Some(pem) = pem else { return false };
            let ok = https_get(8443, &pem, "/healthz")
                .await
                .is_ok_and(|s| s == 200);
            *ca.lock().expect("ca") = pem;
            ok
        },
    )
    .await?;
    // The controller-manager wrote its CA into its webhook configuration (also the router
    // kinds' webhooks, which it serves).
    let hooks = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("kthena-controller-manager-validating-webhook")
        .await?;
    let hooks = hooks.webhooks.unwrap_or_default();
    for hook in &hooks {
        let bundle = hook.client_config.ca_bundle.as_ref().context("caBundle")?;
        assert_eq!(String::from_utf8_lossy(&bundle.0), *ca.lock().expect("ca"));
    }

    let mut router = start_pod(plane, &client, "kthena-router", dir).await?;
    let port = ports.router;
    wait_until(&mut router, READY, "router /readyz", || async move {
        http(port, "GET", "/readyz", "")
            .await
            .is_ok_and(|(s, _)| s == 200)
    })
    .await?;
    if !route {
        return Ok(());
    }
    point_webhooks_at_controller(&client).await?;
    route_through(&client, &mut router, ports).await
}

/// Reads Deployment `name` back, resolves its env, writes its ServiceAccount's kubeconfig
/// and the mounted router configuration, and starts the matching binary with its args.
async fn start_pod(
    plane: &ControlPlane,
    client: &kube::Client,
    name: &str,
    dir: &Path,
) -> Result<Proc> {
    let (d, c) = deployment(client, NAMESPACE, name).await?;
    let pod = d.spec.template.spec.as_ref().context("pod spec")?;
    let sa = pod
        .service_account_name
        .clone()
        .context("serviceAccountName")?;
    let mut env = resolve_env(client, NAMESPACE, &format!("{name}-0"), &sa, &c).await?;
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    service_account_kubeconfig(client, plane.kubeconfig(), NAMESPACE, &sa, &kubeconfig).await?;
    env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let bin = if name == "kthena-router" {
        // The ConfigMap the chart mounts at /etc/config/routerConfiguration.yaml, at a path
        // of this test (the mount is the chart's: check it, then emulate it).
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "scheduler-config");
        let mount = mount.context("the router configuration mount")?;
        assert_eq!(mount.mount_path, "/etc/config/routerConfiguration.yaml");
        assert_eq!(mount.sub_path.as_deref(), Some("routerConfiguration"));
        let cm = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
            .get("kthena-router-config")
            .await?;
        let text = cm
            .data
            .and_then(|d| d.get("routerConfiguration").cloned())
            .context("routerConfiguration")?;
        let path = dir.join("routerConfiguration.yaml");
        std::fs::write(&path, text)?;
        env.push(("KTHENA_ROUTER_CONFIG".into(), path.display().to_string()));
        router_bin()?
    } else {
        env!("CARGO_BIN_EXE_kthena-controller").into()
    };
    Proc::spawn(
        &bin,
        c.args.as_deref().unwrap_or_default(),
        &env,
        dir.join(format!("{name}.log")),
    )
}

/// A Pod served by a kthena-sim engine, a ModelServer and a ModelRoute for it (admitted by
/// the controller-manager's webhook), then a chat completion through the router.
async fn route_through(client: &kube::Client, router: &mut Proc, ports: &Ports) -> Result<()> {
    let ns = "demo";
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let node = SimNode::start(
        client.clone(),
        NodeConfig {
            namespace: Some(ns.to_owned()),
            health_interval: Duration::from_millis(100),
            ..NodeConfig::default()
        },
    );
    let engine = free_port()?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "engine-0", "labels": {"app": "chart-sim"}},
        "spec": {"containers": [{
            "name": "engine", "image": "vllm/vllm-openai",
            "args": ["--model", "chart-model", "--port", engine.to_string()],
            "ports": [{"containerPort": engine}],
        }]},
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    let server: ModelServer = serde_json::from_value(json!({
        "metadata": {"name": "chart-ms", "namespace": ns},
        "spec": {"model": "chart-model", "inferenceEngine": "vLLM",
                 "workloadSelector": {"matchLabels": {"app": "chart-sim"}}, "workloadPort": {"port": engine}},
    }))?;
    Api::<ModelServer>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &server)
        .await?;
    let route: ModelRoute = serde_json::from_value(json!({
        "metadata": {"name": "chart-route", "namespace": ns},
        "spec": {"modelName": "chart-model", "rules": [{"name": "default", "targetModels": [{"modelServerName": "chart-ms"}]}]},
    }))?;
    Api::<ModelRoute>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &route)
        .await?;
    let body =
        r#"{"model":"chart-model","messages":[{"role":"user","content":"hello"}],"max_tokens":4}"#;
    let port = ports.router;
    wait_until(
        router,
        READY,
        "a chat completion through the router",
        || async move {
            http(port, "POST", "/v1/chat/completions", body)
                .await
                .is_ok_and(|(s, b)| s == 200 && b.contains("\"choices\""))
        },
    )
    .await?;
    drop(node);
    Ok(())
}

/// Points every validating webhook of the controller-manager (the workload kinds and the
/// router's) at its port 8443 on 127.0.0.1, as its Service would reach it (this control plane
/// has no Service network), keeping the caBundle it wrote.
async fn point_webhooks_at_controller(client: &kube::Client) -> Result<()> {
    let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    let name = "kthena-controller-manager-validating-webhook";
    let mut cfg = api.get(name).await?;
    for hook in cfg.webhooks.iter_mut().flatten() {
        let svc = hook
            .client_config
            .service
            .take()
            .context("a Service webhook")?;
        let path = svc.path.unwrap_or_default();
        hook.client_config.url = Some(format!("https://127.0.0.1:8443{path}"));
    }
    api.replace(name, &PostParams::default(), &cfg).await?;
    Ok(())
}
