//! Pod termination on the simulated node, on a real API server, as a kubelet does it: the pod
//! turns NotReady, the `preStop` hook runs, the engine drains (no new work, in-flight
//! streams finish) within the grace period, then the pod is removed.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Pod;
use kthena_sim::node::{ARGS_ANNOTATION, NodeConfig, SimNode};
use kthena_testenv::TestNamespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::conditions::is_deleted;
use kube::runtime::wait::{Condition, await_condition};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::common;

/// Upper bound for the node to react (a timeout, not a measured latency).
const WAIT: Duration = Duration::from_secs(20);

/// A pod on `node` serving `m` at `port` (time scale 1: about 10 ms per token), with
/// `grace` seconds of termination grace and `pre_stop` as the engine's `preStop` hook.
fn pod(name: &str, node: &str, port: u16, grace: i64, pre_stop: &serde_json::Value) -> Result<Pod> {
    let mut container = json!({
        "name": "engine", "image": "vllm/vllm-openai",
        "args": ["--model", "m", "--port", port.to_string()],
        "ports": [{"containerPort": port}],
    });
    if !pre_stop.is_null() {
        container["lifecycle"] = json!({ "preStop": pre_stop });
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {ARGS_ANNOTATION: "--time-scale 1"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace,
                 "containers": [container]}
    }))?)
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

fn ready_is(want: &'static str) -> impl Condition<Pod> {
    move |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == want)
    }
}

/// Waits until `name` is Ready (`"True"`) or NotReady (`"False"`) while it exists.
async fn wait_ready(api: &Api<Pod>, name: &str, want: &'static str) -> Result<Pod> {
    tokio::time::timeout(WAIT, await_condition(api.clone(), name, ready_is(want)))
        .await
        .with_context(|| format!("pod {name} never Ready={want}"))??
        .with_context(|| format!("pod {name} is gone"))
}

fn pod_ip(pod: &Pod) -> Result<IpAddr> {
    Ok(pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .context("no podIP")?
        .parse()?)
}

/// Starts a chat stream of `max_tokens` to `ip:port`; returns once the engine counts it in
/// flight.
async fn start_stream(
    node: &SimNode,
    ns: &str,
    ip: IpAddr,
    port: u16,
    max_tokens: u32,
) -> tokio::task::JoinSet<(u16, Vec<String>, bool)> {
    let url = format!("http://{ip}:{port}/v1/chat/completions");
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": max_tokens, "stream": true});
    let mut handle = tokio::task::JoinSet::new();
    handle.spawn(async move { common::stream(&url, &body).await });
    // The first bytes of the stream are out once the engine answered a second request.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(node.engine_addr(ns, "p").is_some());
    handle
}

/// A stream in flight when its pod is deleted (30 s grace, no hook) ends with `[DONE]`;
/// meanwhile the pod is NotReady and the engine refuses new connections; once the stream
/// is done the pod is removed, long before the grace period ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_finishes_its_stream_refuses_new_work_then_goes() -> Result<()> {
    let (ns, node, node_name) = setup("node-term").await?;
    let api = ns.api::<Pod>();
    let port = 8140;
    api.create(
        &PostParams::default(),
        &pod("p", &node_name, port, 30, &json!(null))?,
    )
    .await?;
    let p = wait_ready(&api, "p", "True").await?;
    let ip = pod_ip(&p)?;
    let uid = p.metadata.uid.clone().context("uid")?;
    // About 2.5 s of decoding.
    let mut streaming = start_stream(&node, ns.name(), ip, port, 250).await;
    let t0 = Instant::now();
    api.delete("p", &DeleteParams::default()).await?;
    let p = wait_ready(&api, "p", "False").await?;
    assert!(p.metadata.deletion_timestamp.is_some());
    let refused_by = Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect((ip, port)).await.is_ok() {
        assert!(
            Instant::now() < refused_by,
            "the draining engine still accepts"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, events, clean) = streaming.join_next().await.context("no stream task")??;
    let stream_done = t0.elapsed();
    assert_eq!(status, 200);
    assert!(clean, "the stream was cut after {} events", events.len());
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(events.len() > 200, "{} events", events.len());
    tokio::time::timeout(WAIT, await_condition(api.clone(), "p", is_deleted(&uid))).await??;
    let gone = t0.elapsed();
    eprintln!("stream done {stream_done:?} after the delete, pod gone after {gone:?}");
    assert!(gone < Duration::from_secs(15), "{gone:?}");
    node.stop().await;
    Ok(())
}

/// An `httpGet` preStop hook is sent (here to a listener of the test, which never answers),
/// the engine keeps serving while the hook runs, and the grace period (2 s) bounds it all:
/// the stream still running at its end is cut and the pod is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_stop_runs_first_and_the_grace_period_bounds_the_termination() -> Result<()> {
    let (ns, node, node_name) = setup("node-prestop").await?;
    let api = ns.api::<Pod>();
    let port = 8141;
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook_port = hook.local_addr()?.port();
    let pre_stop = json!({"httpGet": {"host": "127.0.0.1", "port": hook_port, "path": "/drain"}});
    api.create(
        &PostParams::default(),
        &pod("p", &node_name, port, 2, &pre_stop)?,
    )
    .await?;
    let p = wait_ready(&api, "p", "True").await?;
    let ip = pod_ip(&p)?;
    let uid = p.metadata.uid.clone().context("uid")?;
    let mut streaming = start_stream(&node, ns.name(), ip, port, 2000).await;
    let t0 = Instant::now();
    api.delete("p", &DeleteParams::default()).await?;
    let (mut conn, _) = tokio::time::timeout(WAIT, hook.accept()).await??;
    let mut head = vec![0; 1024];
    let n = conn.read(&mut head).await?;
    let head = String::from_utf8_lossy(&head[..n]).into_owned();
    assert!(head.starts_with("GET /drain HTTP/1.1\r\n"), "{head}");
    // The hook is still running: the engine takes new work.
    let (code, body) = common::post_json(
        &format!("http://{ip}:{port}/v1/completions"),
        &json!({"model": "m", "prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    tokio::time::timeout(WAIT, await_condition(api.clone(), "p", is_deleted(&uid))).await??;
    let gone = t0.elapsed();
    let (status, events, clean) = streaming.join_next().await.context("no stream task")??;
    assert_eq!(status, 200);
    assert!(
        !clean,
        "a 20 s stream ended cleanly within a 2 s grace period"
    );
    assert!(!events.iter().any(|e| e == "[DONE]"));
    eprintln!("pod with a hanging preStop gone after {gone:?} (grace 2 s)");
    assert!(
        gone >= Duration::from_millis(1900) && gone < Duration::from_secs(8),
        "{gone:?}"
    );
    conn.shutdown().await.ok();
    node.stop().await;
    Ok(())
}
