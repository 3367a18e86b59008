//! The quick start of `docs/install.md` ("Quick start on a laptop"), as CI runs it: a
//! control plane with kube-controller-manager, `helm install` of `charts/kthena` with the
//! admission webhooks off (as the quick start sets them), the simulated node running the
//! release's Deployments as this build's binaries and the model's pod as a simulated vLLM
//! engine, the ModelBooster of the quick start, and a chat completion through the installed
//! router; `helm uninstall` then takes the release's pods away.

use std::path::Path;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::ModelBooster;
use kthena_testenv::ControlPlane;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::chart_install::{ONE_AT_A_TIME, Ports, helm_on};
use crate::chart_pods::{http, process_node, router_bin};
use crate::chart_support::{NAMESPACE, RELEASE, chart};
use crate::ms_support::eventually;

/// The quick start's ModelBooster (Go Kthena's `examples/model-booster/Qwen2.5-0.5B-Instruct.yaml`).
fn booster() -> Result<ModelBooster> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelBooster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {"backend": {
            "name": "backend1", "type": "vLLM",
            "modelURI": "hf://Qwen/Qwen2.5-0.5B-Instruct", "cacheURI": "hostpath://tmp/cache",
            "replicas": 1,
            "workers": [{"type": "server", "image": "vllm/vllm-openai-cpu:latest",
                         "replicas": 1, "pods": 1,
                         "config": {"served-model-name": "Qwen2.5-0.5B-Instruct"}}],
        }},
    }))?)
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The last lines of every process log under the node's pods directory.
fn pod_logs(dir: &Path) -> String {
    let mut out = String::new();
    for pod in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(pod.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(file.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(20)..].join("\n");
            out.push_str(&format!("== {}\n{tail}\n", file.path().display()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_laptop_quick_start_answers_a_chat_completion() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = ControlPlane::start().await?;
    plane.start_controller_manager().await?;
    let client = plane.client().await?;
    // The router binds all addresses: free ports instead of the chart's 8080, 9090, 15000.
    let ports = Ports::free()?;
    let mut sets = ports.sets();
    sets.push("workload.controllerManager.webhook.enabled=false".into());
    sets.push("networking.kthenaRouter.webhook.enabled=false".into());
    let chart = chart();
    let chart = chart.to_str().context("chart path")?;
    helm_on(
        &plane,
        &["install", RELEASE, chart, "--create-namespace"],
        &sets,
    )?;

    let pods_dir = tempfile::tempdir()?;
    let bin_dir = router_bin()?
        .parent()
        .context("binary directory")?
        .to_owned();
    let node = process_node(&plane, bin_dir, pods_dir.path()).await?;
    let logs = pods_dir.path();
    let release: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let lp = ListParams::default();
    eventually("the release's pods Ready", || async {
        let pods = release.list(&lp).await?.items;
        Ok((pods.len() == 2 && pods.iter().all(ready)).then_some(()))
    })
    .await
    .with_context(|| pod_logs(logs))?;

    Api::<ModelBooster>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &booster()?)
        .await?;
    let body = json!({"model": "demo", "max_tokens": 16,
                      "messages": [{"role": "user", "content": "Hello"}]})
    .to_string();
    let answer = eventually("a chat completion through the router", || async {
        let (status, text) = http(ports.router, "POST", "/v1/chat/completions", &body)
            .await
            .unwrap_or((0, String::new()));
        Ok((status == 200).then_some(text))
    })
    .await
    .with_context(|| pod_logs(logs))?;
    let answer: serde_json::Value = serde_json::from_str(&answer)?;
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    let content = answer["choices"][0]["message"]["content"].as_str();
    assert!(content.is_some_and(|c| !c.is_empty()), "{answer}");

    helm_on(&plane, &["uninstall", RELEASE, "--wait"], &[])?;
    eventually("the release's pods gone", || async {
        Ok(release.list(&lp).await?.items.is_empty().then_some(()))
    })
    .await
    .with_context(|| pod_logs(logs))?;
    node.stop().await;
    Ok(())
}
