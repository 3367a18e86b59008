//! The simulated node on a real API server: pods become Running and Ready with a loopback
//! podIP where an engine answers, NotReady and exit on demand, and go away when deleted.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use kthena_sim::node::{ARGS_ANNOTATION, EXIT_ANNOTATION, NodeConfig, READY_ANNOTATION, SimNode};
use kthena_testenv::TestNamespace;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use serde_json::json;

use crate::common;

/// Upper bound for the node to react (a timeout, not a measured latency).
const WAIT: Duration = Duration::from_secs(20);

fn pod(name: &str, node: &str, model: &str, port: u16) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "vllm"}},
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "engine", "image": "vllm/vllm-openai",
                "args": ["--model", model, "--port", port.to_string()],
                "ports": [{"containerPort": port}]
            }]
        }
    }))?)
}

async fn wait_for(
    api: &Api<Pod>,
    name: &str,
    what: &str,
    cond: impl Condition<Pod>,
) -> Result<Pod> {
    let got = tokio::time::timeout(WAIT, await_condition(api.clone(), name, cond))
        .await
        .with_context(|| format!("pod {name}: {what}"))??;
    got.with_context(|| format!("pod {name} is gone"))
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    let conds = pod.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn is_ready(want: bool) -> impl Condition<Pod> {
    move |p: Option<&Pod>| {
        p.and_then(|p| condition(p, "Ready")).as_deref()
            == Some(if want { "True" } else { "False" })
    }
}

fn pod_ip(pod: &Pod) -> Result<IpAddr> {
    Ok(pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("no podIP")?
        .parse()?)
}

/// A namespace and a node running its pods on node `sim-<namespace>`.
/// Waits until pod `name` is `Failed` and not Ready; its first container's status and
/// terminated state.
async fn wait_failed(
    api: &Api<Pod>,
    name: &str,
) -> Result<(ContainerStatus, ContainerStateTerminated)> {
    let failed = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.phase.clone()).as_deref() == Some("Failed")
    };
    let p = wait_for(api, name, "Failed", failed).await?;
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    let cs = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .and_then(|s| s.into_iter().next())
        .context("statuses")?;
    let terminated = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .context("terminated")?;
    Ok((cs, terminated))
}

async fn setup(prefix: &str) -> Result<(TestNamespace, SimNode, String)> {
    let ns = kthena_testenv::namespace(prefix).await?;
    let node_name = format!("sim-{}", ns.name());
    let config = NodeConfig {
        node_name: Some(node_name.clone()),
        health_interval: Duration::from_millis(100),
        ..NodeConfig::default()
    };
    let node = SimNode::start(ns.client().clone(), config);
    Ok((ns, node, node_name))
}

#[tokio::test]
async fn pod_runs_and_its_engine_serves_at_pod_ip() -> Result<()> {
    let (ns, node, node_name) = setup("node-run").await?;
    let api = ns.api::<Pod>();
    // A pod of another node is left alone.
    api.create(
        &PostParams::default(),
        &pod("other", "elsewhere", "m", 8100)?,
    )
    .await?;
    api.create(
        &PostParams::default(),
        &pod("p", &node_name, "Qwen/Qwen3-8B", 8100)?,
    )
    .await?;
    let p = wait_for(&api, "p", "Ready", is_ready(true)).await?;
    let status = p.status.clone().context("status")?;
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let ip = pod_ip(&p)?;
    let IpAddr::V4(v4) = ip else {
        anyhow::bail!("IPv6 podIP {ip}")
    };
    assert_eq!(v4.octets()[..3], [127, 0, 0], "podIP {ip}");
    assert_ne!(v4.octets()[3], 1, "podIP {ip} is not 127.0.0.1");
    assert_eq!(
        status.pod_ips.map(|ips| ips[0].ip.clone()),
        Some(ip.to_string())
    );
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
    let cs = &status.container_statuses.context("containerStatuses")?[0];
    assert_eq!(
        (cs.name.as_str(), cs.ready, cs.started),
        ("engine", true, Some(true))
    );
    assert!(cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    assert_eq!(condition(&p, "ContainersReady").as_deref(), Some("True"));
    assert_eq!(node.engine_addr(ns.name(), "p"), Some((ip, 8100).into()));

    let models = common::get_json(&format!("http://{ip}:8100/v1/models")).await;
    assert_eq!(models["data"][0]["id"], "Qwen/Qwen3-8B");
    let (code, body) = common::post_json(
        &format!("http://{ip}:8100/v1/completions"),
        &json!({"model": "Qwen/Qwen3-8B", "prompt": "hi", "max_tokens": 3}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["usage"]["completion_tokens"], 3);

    let other = api.get("other").await?;
    assert_eq!(
        other.status.and_then(|s| s.pod_ip),
        None,
        "the other node's pod has no podIP"
    );
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn deleting_a_pod_stops_its_engine_and_removes_it() -> Result<()> {
    let (ns, node, node_name) = setup("node-delete").await?;
    let api = ns.api::<Pod>();
    api.create(&PostParams::default(), &pod("p", &node_name, "m", 8101)?)
        .await?;
    let p = wait_for(&api, "p", "Ready", is_ready(true)).await?;
    let ip = pod_ip(&p)?;
    let uid = p.metadata.uid.clone().context("uid")?;
    // A default delete (30 s grace): the node stops the engine and finishes the deletion.
    api.delete("p", &DeleteParams::default()).await?;
    let gone = tokio::time::timeout(
        WAIT,
        await_condition(
            api.clone(),
            "p",
            kube::runtime::conditions::is_deleted(&uid),
        ),
    )
    .await;
    assert!(matches!(gone, Ok(Ok(_))), "the pod is removed: {gone:?}");
    assert_eq!(node.engine_addr(ns.name(), "p"), None);
    let refused = tokio::net::TcpStream::connect((ip, 8101)).await;
    assert!(refused.is_err(), "the engine at {ip}:8101 is stopped");
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn ready_annotation_turns_a_pod_not_ready_and_back() -> Result<()> {
    let (ns, node, node_name) = setup("node-ready").await?;
    let api = ns.api::<Pod>();
    api.create(&PostParams::default(), &pod("p", &node_name, "m", 8102)?)
        .await?;
    let p = wait_for(&api, "p", "Ready", is_ready(true)).await?;
    let ip = pod_ip(&p)?;
    let set = |v: Option<&str>| json!({"metadata": {"annotations": {READY_ANNOTATION: v}}});
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(set(Some("false"))),
    )
    .await?;
    let p = wait_for(&api, "p", "NotReady", is_ready(false)).await?;
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert_eq!(condition(&p, "ContainersReady").as_deref(), Some("False"));
    assert_eq!(pod_ip(&p)?, ip, "the podIP stays");
    // The engine keeps serving; only the pod's readiness changed.
    let (status, _) = common::send("GET", &format!("http://{ip}:8102/health"), None).await;
    assert_eq!(status, 200);
    api.patch("p", &PatchParams::default(), &Patch::Merge(set(None)))
        .await?;
    wait_for(&api, "p", "Ready again", is_ready(true)).await?;
    node.stop().await;
    Ok(())
}

/// `--startup-delay-ms`: the pod runs with its podIP at once but turns Ready only once the
/// model has loaded; what arrives before is refused 503 and counted, `/metrics` answers.
#[tokio::test]
async fn an_engine_loading_its_model_turns_ready_after_the_delay() -> Result<()> {
    let (ns, node, node_name) = setup("node-load").await?;
    let api = ns.api::<Pod>();
    let mut p = pod("p", &node_name, "m", 8121)?;
    let args = [
        "--model",
        "m",
        "--port",
        "8121",
        "--startup-delay-ms",
        "2000",
    ];
    let c = &mut p.spec.as_mut().context("spec")?.containers[0];
    c.command = Some(vec!["kthena-sim".to_owned()]);
    c.args = Some(args.iter().map(|a| (*a).to_owned()).collect());
    let created = tokio::time::Instant::now();
    api.create(&PostParams::default(), &p).await?;
    let running = |p: Option<&Pod>| p.and_then(|p| p.status.as_ref()?.pod_ip.clone()).is_some();
    let p = wait_for(&api, "p", "a podIP", running).await?;
    assert_eq!(
        condition(&p, "Ready").as_deref(),
        Some("False"),
        "loading after {:?}",
        created.elapsed()
    );
    let ip = pod_ip(&p)?;
    let (status, _) = common::send("GET", &format!("http://{ip}:8121/health"), None).await;
    assert_eq!(status, 503);
    let (code, body) = common::post_json(
        &format!("http://{ip}:8121/v1/completions"),
        &json!({"model": "m", "prompt": "hi", "max_tokens": 3}),
    )
    .await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["message"], "The model is still loading");
    let (status, _) = common::send("GET", &format!("http://{ip}:8121/metrics"), None).await;
    assert_eq!(status, 200);
    assert_eq!(node.requests_while_loading(ns.name(), "p"), Some(1));

    wait_for(&api, "p", "Ready after loading", is_ready(true)).await?;
    assert!(
        created.elapsed() >= Duration::from_secs(2),
        "Ready only after the 2 s delay, got {:?}",
        created.elapsed()
    );
    let (code, body) = common::post_json(
        &format!("http://{ip}:8121/v1/completions"),
        &json!({"model": "m", "prompt": "hi", "max_tokens": 3}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(node.requests_while_loading(ns.name(), "p"), Some(1));
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn exit_annotation_fails_the_container() -> Result<()> {
    let (ns, node, node_name) = setup("node-exit").await?;
    let api = ns.api::<Pod>();
    api.create(&PostParams::default(), &pod("p", &node_name, "m", 8103)?)
        .await?;
    let p = wait_for(&api, "p", "Ready", is_ready(true)).await?;
    let ip = pod_ip(&p)?;
    let exit = json!({"metadata": {"annotations": {EXIT_ANNOTATION: "3"}}});
    api.patch("p", &PatchParams::default(), &Patch::Merge(exit))
        .await?;
    let (cs, terminated) = wait_failed(&api, "p").await?;
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (3, Some("Error"))
    );
    assert!(!cs.ready);
    assert_eq!(node.engine_addr(ns.name(), "p"), None);
    assert!(
        tokio::net::TcpStream::connect((ip, 8103)).await.is_err(),
        "engine stopped"
    );
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_crashed_engine_fails_the_container() -> Result<()> {
    let (ns, node, node_name) = setup("node-crash").await?;
    let api = ns.api::<Pod>();
    api.create(&PostParams::default(), &pod("p", &node_name, "m", 8106)?)
        .await?;
    wait_for(&api, "p", "Ready", is_ready(true)).await?;
    assert!(node.crash_engine(ns.name(), "p").await);
    let (_, terminated) = wait_failed(&api, "p").await?;
    assert_eq!(terminated.exit_code, 1);
    assert_eq!(
        terminated.message.as_deref(),
        Some("the engine stopped answering /health")
    );
    assert_eq!(node.engine_addr(ns.name(), "p"), None);
    node.stop().await;
    Ok(())
}

#[tokio::test]
async fn pods_on_one_port_get_their_own_addresses() -> Result<()> {
    let (ns, node, node_name) = setup("node-addrs").await?;
    let api = ns.api::<Pod>();
    api.create(&PostParams::default(), &pod("a", &node_name, "m", 8104)?)
        .await?;
    let a = pod_ip(&wait_for(&api, "a", "Ready", is_ready(true)).await?)?;
    api.create(&PostParams::default(), &pod("b", &node_name, "m", 8104)?)
        .await?;
    let b = pod_ip(&wait_for(&api, "b", "Ready", is_ready(true)).await?)?;
    assert_ne!(a, b);
    let uid = api.get("a").await?.metadata.uid.context("uid")?;
    api.delete("a", &DeleteParams::default()).await?;
    let gone = await_condition(
        api.clone(),
        "a",
        kube::runtime::conditions::is_deleted(&uid),
    );
    tokio::time::timeout(WAIT, gone).await??;
    api.create(&PostParams::default(), &pod("c", &node_name, "m", 8104)?)
        .await?;
    let c = pod_ip(&wait_for(&api, "c", "Ready", is_ready(true)).await?)?;
    // Exact reuse of the lowest freed address is checked by the allocator's unit test: here
    // other tests of this binary allocate at the same time.
    assert_ne!(c, b, "c must not share b's address");
    node.stop().await;
    Ok(())
}

/// `sim.kthena.io/args` replaces the node's defaults; the pod's `--model` and `--port` stay.
#[tokio::test]
async fn args_annotation_keeps_the_pods_model_and_port() -> Result<()> {
    let (ns, node, node_name) = setup("node-args").await?;
    let api = ns.api::<Pod>();
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": {
            ARGS_ANNOTATION: "--max-num-seqs 1 --time-scale 1 --block-size 32"}},
        "spec": {"nodeName": node_name, "containers": [{
            "name": "engine", "image": "vllm/vllm-openai",
            "args": ["--model", "asm", "--port", "8108"]
        }]}
    }))?;
    api.create(&PostParams::default(), &p).await?;
    let ip = pod_ip(&wait_for(&api, "p", "Ready", is_ready(true)).await?)?;
    assert_eq!(node.engine_addr(ns.name(), "p"), Some((ip, 8108).into()));
    let base = format!("http://{ip}:8108");
    let models = common::get_json(&format!("{base}/v1/models")).await;
    assert_eq!(models["data"][0]["id"], "asm");
    let (code, body) = common::post_json(
        &format!("{base}/v1/completions"),
        &json!({"model": "asm", "prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    // The annotation's flags apply.
    let metrics = common::get_text(&format!("{base}/metrics")).await;
    assert!(
        metrics.contains("block_size=\"32\""),
        "vllm:cache_config_info has the annotation's block size: {metrics}"
    );
    node.stop().await;
    Ok(())
}

/// A ModelBooster's pod (Go's `vllm.yaml`): the runtime sidecar comes first and has the only
/// `containerPort` (8100); the engine serves the ModelServer's port, 8000.
#[tokio::test]
async fn model_booster_pod_serves_on_the_engine_port() -> Result<()> {
    let (ns, node, node_name) = setup("node-booster").await?;
    let api = ns.api::<Pod>();
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "demo-backend1-0"},
        "spec": {"nodeName": node_name, "containers": [
            {"name": "runtime", "image": "kthena/runtime:latest",
             "ports": [{"containerPort": 8100}],
             "args": ["--port", "8100", "--engine", "vllm",
                "--engine-base-url", "http://localhost:8000",
                "--engine-metrics-path", "/metrics",
                "--pod", "$(POD_NAME).$(NAMESPACE)", "--model", "demo"],
             "readinessProbe": {"httpGet": {"path": "/health", "port": 8100}}},
            {"name": "engine", "image": "vllm/vllm-openai",
             "command": ["python3", "-m", "vllm.entrypoints.openai.api_server",
                "--model", "/tmp/cache/1b2a4d6f", "--block-size", "128",
                "--served-model-name", "Qwen2.5-0.5B-Instruct"],
             "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}
        ]}
    }))?;
    api.create(&PostParams::default(), &p).await?;
    let ip = pod_ip(&wait_for(&api, "demo-backend1-0", "Ready", is_ready(true)).await?)?;
    assert_eq!(
        node.engine_addr(ns.name(), "demo-backend1-0"),
        Some((ip, 8000).into())
    );
    let (code, body) = common::post_json(
        &format!("http://{ip}:8000/v1/chat/completions"),
        &json!({"model": "Qwen2.5-0.5B-Instruct", "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    node.stop().await;
    Ok(())
}

/// `kthena-sim node` (the binary) selects pods by namespace and label.
#[tokio::test]
async fn node_subcommand_runs_selected_pods() -> Result<()> {
    let ns = kthena_testenv::namespace("node-cli").await?;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kthena-sim"))
        .arg("node")
        .arg("--kubeconfig")
        .arg(ns.env().kubeconfig())
        .args([
            "--namespace",
            ns.name(),
            "--selector",
            "app=vllm",
            "--time-scale",
            "10",
        ])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let api = ns.api::<Pod>();
    let mut unselected = pod("unselected", "any", "m", 8105)?;
    unselected.metadata.labels = None;
    api.create(&PostParams::default(), &unselected).await?;
    api.create(&PostParams::default(), &pod("p", "any", "served", 8105)?)
        .await?;
    let p = wait_for(&api, "p", "Ready", is_ready(true)).await?;
    let models = common::get_json(&format!("http://{}:8105/v1/models", pod_ip(&p)?)).await;
    assert_eq!(models["data"][0]["id"], "served");
    let other = api.get("unselected").await?;
    assert_eq!(
        other.status.and_then(|s| s.pod_ip),
        None,
        "a pod without the label is left alone"
    );
    child.kill().await?;
    Ok(())
}

/// The node keeps its engines while the API server is away and resumes watching after.
#[tokio::test]
async fn node_resumes_after_an_api_server_restart() -> Result<()> {
    let plane = kthena_testenv::ControlPlane::start().await?;
    let client = plane.client().await?;
    let config = NodeConfig {
        namespace: Some("default".to_owned()),
        ..NodeConfig::default()
    };
    let node = SimNode::start(client.clone(), config);
    let api: Api<Pod> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &pod("before", "any", "m", 8107)?)
        .await?;
    let ip = pod_ip(&wait_for(&api, "before", "Ready", is_ready(true)).await?)?;

    plane.stop_apiserver().await?;
    let (status, _) = common::send("GET", &format!("http://{ip}:8107/health"), None).await;
    assert_eq!(
        status, 200,
        "the engine serves while the API server is down"
    );
    plane.start_apiserver().await?;

    api.create(&PostParams::default(), &pod("after", "any", "m", 8107)?)
        .await?;
    wait_for(&api, "after", "Ready after the restart", is_ready(true)).await?;
    assert_eq!(
        node.engine_addr("default", "before"),
        Some((ip, 8107).into())
    );
    node.stop().await;
    Ok(())
}

/// An engine pod started as Kthena's examples start vLLM (`sh -c` with
/// `--kv-events-config`) publishes its KV events at `podIP:5557` with the configured topic
/// and replays them at `podIP:5558`.
#[tokio::test]
async fn kv_events_config_publishes_at_the_pod_ip_and_replays() -> Result<()> {
    use bytes::Bytes;
    use zeromq::{Socket as _, SocketRecv as _, SocketSend as _};

    let (ns, node, node_name) = setup("node-kv").await?;
    let api = ns.api::<Pod>();
    let script = r#"python3 -m vllm.entrypoints.openai.api_server --port "8000" \
        --served-model-name Qwen/Qwen3-0.6B \
        --kv-events-config '{"enable_kv_cache_events":true,"topic":"kv-events","replay_endpoint":"tcp://*:5558"}'"#;
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kv"},
        "spec": {"nodeName": node_name, "containers": [{
            "name": "server", "image": "vllm/vllm-openai",
            "command": ["sh", "-c"], "args": [script]}]}
    }))?;
    api.create(&PostParams::default(), &p).await?;
    let p = wait_for(&api, "kv", "Ready", is_ready(true)).await?;
    let ip = pod_ip(&p)?;

    let mut sub = zeromq::SubSocket::new();
    sub.connect(&format!("tcp://{ip}:5557")).await?;
    sub.subscribe("kv-events").await?;
    // ZMQ's slow joiner: let the publisher register the subscription.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, body) = common::post_json(
        &format!("http://{ip}:8000/v1/completions"),
        &json!({"model": "Qwen/Qwen3-0.6B", "prompt": "hello ".repeat(50), "max_tokens": 2}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let live = tokio::time::timeout(WAIT, sub.recv()).await??.into_vec();
    assert_eq!(live[0], Bytes::from_static(b"kv-events"));
    assert_eq!(live[1], Bytes::copy_from_slice(&0u64.to_be_bytes()));

    let mut dealer = zeromq::DealerSocket::new();
    dealer.connect(&format!("tcp://{ip}:5558")).await?;
    let mut req = zeromq::ZmqMessage::from(Bytes::new());
    req.push_back(Bytes::copy_from_slice(&0u64.to_be_bytes()));
    dealer.send(req).await?;
    let first = tokio::time::timeout(WAIT, dealer.recv()).await??.into_vec();
    assert_eq!(first, vec![Bytes::new(), live[1].clone(), live[2].clone()]);
    node.stop().await;
    Ok(())
}
