//! The controller on a real API server (kthena-testenv), with pods made Running and Ready by
//! the simulated node: Kthena's example ModelServings reconcile to Go's pods and services
//! and become Available; `kubectl scale` converges, deleting in Go's order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kthena_api::ModelServing;
use kthena_controller::manager::{Controllers, LEASE_NAME, LeaderElection, run_leader_elected};
use kthena_controller::serving::Config;
use kthena_sim::node::{NodeConfig, SimNode};
use kthena_testenv::TestNamespace;
use kube::ResourceExt as _;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::task::JoinSet;

use crate::ms_support::*;

fn env(pod: &Pod) -> BTreeMap<String, String> {
    let c = pod.spec.clone().unwrap_or_default().containers.remove(0);
    c.env
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn sample_reconciles_to_gos_pods_and_services_and_becomes_available() -> Result<()> {
    let env_ = setup("ctl-sample").await?;
    let ns = &env_.ns;
    let created = create_example(ns, "sample.yaml").await?;
    let ms = available(ns, "sample", 1).await?;
    let mut want = Vec::new();
    for role in ["decode", "prefill"] {
        want.extend((0..4).map(|i| format!("sample-0-{role}-0-{i}")));
    }
    assert_eq!(pod_names(ns, "sample").await?, want);
    let pods = ns.api::<Pod>();
    let entry = pods.get("sample-0-prefill-0-0").await?;
    let rev = ms
        .status
        .clone()
        .unwrap_or_default()
        .update_revision
        .context("no updateRevision")?;
    let labels = entry.labels();
    assert_eq!(labels["modelserving.volcano.sh/name"], "sample");
    assert_eq!(labels["modelserving.volcano.sh/group-name"], "sample-0");
    assert_eq!(labels["modelserving.volcano.sh/role"], "prefill");
    assert_eq!(labels["modelserving.volcano.sh/role-id"], "prefill-0");
    assert_eq!(labels["modelserving.volcano.sh/entry"], "true");
    assert_eq!(labels["modelserving.volcano.sh/revision"], rev);
    assert_eq!(labels.len(), 7);
    let worker = pods.get("sample-0-prefill-0-2").await?;
    assert!(
        !worker
            .labels()
            .contains_key("modelserving.volcano.sh/entry")
    );
    let address = format!("sample-0-prefill-0-0.{}", ns.name());
    let want_env = |i: &str| {
        BTreeMap::from([
            ("GROUP_SIZE".to_owned(), "4".to_owned()),
            ("ENTRY_ADDRESS".to_owned(), address.clone()),
            ("WORKER_INDEX".to_owned(), i.to_owned()),
        ])
    };
    assert_eq!(env(&entry), want_env("0"));
    assert_eq!(env(&worker), want_env("2"));
    let owner = &worker.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ModelServing", "sample")
    );
    assert_eq!(Some(owner.uid.clone()), created.uid());
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(
        worker
            .spec
            .clone()
            .unwrap_or_default()
            .scheduler_name
            .as_deref(),
        Some("volcano")
    );

    let svcs = ns.api::<Service>().list(&ListParams::default()).await?;
    let mut names: Vec<_> = svcs.items.iter().map(|s| s.name_any()).collect();
    names.sort();
    assert_eq!(names, ["sample-0-decode-0-0", "sample-0-prefill-0-0"]);
    let spec = svcs.items[0].spec.clone().unwrap_or_default();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));

    let st = ms.status.clone().unwrap_or_default();
    assert_eq!(
        (st.replicas, st.updated_replicas, st.current_replicas),
        (1, Some(1), Some(1))
    );
    assert_eq!(st.observed_generation, ms.metadata.generation);
    assert_eq!(
        st.label_selector.as_deref(),
        Some(
            "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name=sample,modelserving.volcano.sh/role=prefill,modelserving.volcano.sh/role-id=prefill-0"
        )
    );
    // Progressing (written while the pods started) was turned False, or never written.
    assert_ne!(condition(&ms, "Progressing").as_deref(), Some("True"));
    let cr = ns
        .api::<ControllerRevision>()
        .get(&format!("sample-{rev}"))
        .await?;
    assert_eq!(cr.revision, Some(1));
    Ok(())
}

#[tokio::test]
async fn kubectl_scale_converges_deleting_in_gos_order() -> Result<()> {
    let env_ = setup("ctl-scale").await?;
    let ns = &env_.ns;
    create_example(ns, "multi-node.yaml").await?;
    let name = "llama-multinode";
    available(ns, name, 1).await?;
    assert_eq!(pod_names(ns, name).await?.len(), 4);
    let scale = |n: u32| {
        let out = ns
            .kubectl()
            .args(["scale", "modelserving", name, &format!("--replicas={n}")])
            .output();
        async move {
            let out = out?;
            if !out.status.success() {
                bail!("kubectl scale: {}", String::from_utf8_lossy(&out.stderr));
            }
            Ok(())
        }
    };
    scale(3).await?;
    available(ns, name, 3).await?;
    assert_eq!(pod_names(ns, name).await?.len(), 12);
    let svcs = ns.api::<Service>().list(&ListParams::default()).await?;
    assert_eq!(svcs.items.len(), 6);
    // Group 2 is expensive to delete: groups 1 then 0 go first (cost, then highest ordinal).
    let cost =
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "100"}}});
    ns.api::<Pod>()
        .patch(
            "llama-multinode-2-llama-405b-0-0",
            &PatchParams::default(),
            &Patch::Merge(&cost),
        )
        .await?;
    scale(1).await?;
    let ms = available(ns, name, 1).await?;
    let want: Vec<String> = ["0-0", "0-1", "1-0", "1-1"]
        .iter()
        .map(|s| format!("llama-multinode-2-llama-405b-{s}"))
        .collect();
    eventually("pods of group 2 only", || async {
        Ok((pod_names(ns, name).await? == want).then_some(()))
    })
    .await?;
    let svcs = ns.api::<Service>().list(&ListParams::default()).await?;
    let mut names: Vec<_> = svcs.items.iter().map(|s| s.name_any()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "llama-multinode-2-llama-405b-0-0",
            "llama-multinode-2-llama-405b-1-0"
        ]
    );
    assert_eq!(ms.status.unwrap_or_default().replicas, 1);
    // Regression: at 0 the counts kept their last values (3 replicas, Progressing), and so
    // did the scale subresource an HPA reads.
    scale(0).await?;
    let ms = available(ns, name, 0).await?;
    let st = ms.status.unwrap_or_default();
    assert_eq!(
        (st.updated_replicas, st.current_replicas),
        (Some(0), Some(0))
    );
    assert!(pod_names(ns, name).await?.is_empty());
    Ok(())
}

async fn uids(ns: &TestNamespace, ms: &str) -> Result<BTreeMap<String, String>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={ms}"));
    let pods = ns.api::<Pod>().list(&lp).await?.items;
    Ok(pods
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

#[tokio::test]
async fn a_deleted_pod_recreates_its_role_replica() -> Result<()> {
    let env_ = setup("ctl-recover").await?;
    let ns = &env_.ns;
    create_example(ns, "sample.yaml").await?;
    available(ns, "sample", 1).await?;
    let before = uids(ns, "sample").await?;
    ns.api::<Pod>()
        .delete("sample-0-prefill-0-2", &Default::default())
        .await?;
    // RoleRecreate (the default): every pod of prefill-0 is new, decode's are untouched.
    let after = eventually("prefill-0 recreated", || async {
        let now = uids(ns, "sample").await?;
        let renewed = (0..4).all(|i| {
            let name = format!("sample-0-prefill-0-{i}");
            now.get(&name).is_some_and(|u| Some(u) != before.get(&name))
        });
        Ok((renewed && now.len() == 8).then_some(now))
    })
    .await?;
    for i in 0..4 {
        let name = format!("sample-0-decode-0-{i}");
        assert_eq!(after.get(&name), before.get(&name), "{name}");
    }
    available(ns, "sample", 1).await?;
    Ok(())
}

#[tokio::test]
async fn an_errored_pod_is_replaced_alone_with_recovery_policy_none() -> Result<()> {
    let env_ = setup("ctl-errored").await?;
    let ns = &env_.ns;
    let created = create_example(ns, "multi-node.yaml").await?;
    let name = "llama-multinode";
    let patch =
        json!({"spec": {"recoveryPolicy": "None", "template": {"restartGracePeriodSeconds": 0}}});
    ns.api::<ModelServing>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    assert!(created.uid().is_some());
    available(ns, name, 1).await?;
    let before = uids(ns, name).await?;
    let failed = "llama-multinode-0-llama-405b-1-1";
    let exit = json!({"metadata": {"annotations": {kthena_sim::node::EXIT_ANNOTATION: "3"}}});
    ns.api::<Pod>()
        .patch(failed, &PatchParams::default(), &Patch::Merge(&exit))
        .await?;
    let after = eventually("the failed pod replaced", || async {
        let now = uids(ns, name).await?;
        Ok(
            (now.len() == 4 && now.get(failed) != before.get(failed) && now.contains_key(failed))
                .then_some(now),
        )
    })
    .await?;
    for (pod, uid) in &before {
        if pod != failed {
            assert_eq!(after.get(pod), Some(uid), "{pod} was replaced");
        }
    }
    available(ns, name, 1).await?;
    Ok(())
}

/// Field managers of the pods' non-status writes, by pod.
async fn creators(ns: &TestNamespace, ms: &str) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={ms}"));
    let pods = ns.api::<Pod>().list(&lp).await?.items;
    Ok(pods
        .iter()
        .map(|p| {
            let fields = p.metadata.managed_fields.iter().flatten();
            let managers = fields
                .filter(|f| f.subresource.is_none())
                .filter_map(|f| f.manager.clone())
                .collect();
            (p.name_any(), managers)
        })
        .collect())
}

/// The controller field managers (`ctl-*`) of every write in the namespace: pods, services,
/// ControllerRevisions and ModelServings (their status subresource included).
async fn writers(ns: &TestNamespace) -> Result<BTreeSet<String>> {
    fn of<K: kube::Resource>(items: &[K]) -> impl Iterator<Item = String> + '_ {
        items
            .iter()
            .flat_map(|o| o.meta().managed_fields.iter().flatten())
            .filter_map(|f| f.manager.clone())
            .filter(|m| m.starts_with("ctl-"))
    }
    let lp = ListParams::default();
    let pods = ns.api::<Pod>().list(&lp).await?.items;
    let services = ns.api::<Service>().list(&lp).await?.items;
    let revisions = ns.api::<ControllerRevision>().list(&lp).await?.items;
    let servings = ns.api::<ModelServing>().list(&lp).await?.items;
    Ok(of(&pods)
        .chain(of(&services))
        .chain(of(&revisions))
        .chain(of(&servings))
        .collect())
}

async fn holder(ns: &TestNamespace) -> Result<Option<String>> {
    let lease = ns.api::<Lease>().get_opt(LEASE_NAME).await?;
    Ok(lease.and_then(|l| l.spec?.holder_identity))
}

#[tokio::test]
async fn only_the_lease_holder_reconciles_and_a_standby_takes_over() -> Result<()> {
    let ns = kthena_testenv::namespace("ctl-leader").await?;
    let _node = SimNode::start(
        ns.client().clone(),
        NodeConfig {
            namespace: Some(ns.name().to_owned()),
            health_interval: Duration::from_millis(100),
            ..NodeConfig::default()
        },
    );
    let start = |id: &str| {
        let config = Controllers {
            serving: Config {
                namespace: Some(ns.name().to_owned()),
                workers: 2,
                field_manager: format!("ctl-{id}"),
                ..Config::default()
            },
            ..Controllers::default()
        };
        let election = LeaderElection {
            lease_name: LEASE_NAME.to_owned(),
            namespace: ns.name().to_owned(),
            identity: id.to_owned(),
            duration: Duration::from_secs(3),
            retry: Duration::from_secs(1),
        };
        let mut set = JoinSet::new();
        set.spawn(run_leader_elected(
            ns.client().clone(),
            config,
            election,
            std::future::pending(),
        ));
        set
    };
    let mut a = start("a");
    eventually("a holds the lease", || async {
        Ok((holder(&ns).await?.as_deref() == Some("a")).then_some(()))
    })
    .await?;
    let _b = start("b");
    create_example(&ns, "multi-node.yaml").await?;
    let name = "llama-multinode";
    available(&ns, name, 1).await?;
    let managers: BTreeSet<String> = creators(&ns, name).await?.into_values().flatten().collect();
    assert_eq!(managers, BTreeSet::from(["ctl-a".to_owned()]));
    // The follower wrote nothing at all: no pod, service, revision or status.
    assert_eq!(writers(&ns).await?, BTreeSet::from(["ctl-a".to_owned()]));
    assert_eq!(holder(&ns).await?.as_deref(), Some("a"));
    // The leader is killed (its task dropped, the Lease not released); the standby takes
    // the lease once it expires and reconciles from then on.
    a.abort_all();
    while a.join_next().await.is_some() {}
    let killed = tokio::time::Instant::now();
    eventually("b holds the lease", || async {
        Ok((holder(&ns).await?.as_deref() == Some("b")).then_some(()))
    })
    .await?;
    // Within the lease time: the 3 s lease and one 1 s retry of the standby, with room for
    // API calls on a loaded machine (a correctness bound, not a latency measurement).
    let handover = killed.elapsed();
    assert!(
        handover < Duration::from_secs(3 + 1 + 10),
        "handover took {handover:?}"
    );
    let out = ns
        .kubectl()
        .args(["scale", "modelserving", name, "--replicas=2"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    available(&ns, name, 2).await?;
    let by_pod = creators(&ns, name).await?;
    for (pod, managers) in &by_pod {
        let want = if pod.starts_with("llama-multinode-1-") {
            "ctl-b"
        } else {
            "ctl-a"
        };
        assert_eq!(managers, &BTreeSet::from([want.to_owned()]), "{pod}");
    }
    assert_eq!(by_pod.len(), 8);
    // The new leader wrote the status of the scaled ModelServing.
    let ms = ns.api::<ModelServing>().get(name).await?;
    let status_writers: BTreeSet<String> = ms
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter_map(|f| f.manager.clone())
        .collect();
    assert!(status_writers.contains("ctl-b"), "{status_writers:?}");
    Ok(())
}

/// Ordinals of groups whose `size` pods all exist, Running and Ready.
async fn ready_groups(ns: &TestNamespace, ms: &str, size: usize) -> Result<BTreeSet<String>> {
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={ms}"));
    let pods = ns.api::<Pod>().list(&lp).await?.items;
    let mut ready: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods
        .iter()
        .filter(|p| kthena_controller::serving::running_and_ready(p))
    {
        *ready
            .entry(p.labels()["modelserving.volcano.sh/group-name"].clone())
            .or_default() += 1;
    }
    Ok(ready
        .into_iter()
        .filter(|(_, n)| *n == size)
        .map(|(g, _)| g)
        .collect())
}

#[tokio::test]
async fn a_template_change_rolls_every_group_within_max_unavailable() -> Result<()> {
    let env_ = setup("ctl-rolling").await?;
    let ns = &env_.ns;
    create_example(ns, "multi-node.yaml").await?;
    let name = "llama-multinode";
    let api = ns.api::<ModelServing>();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 3}})),
    )
    .await?;
    let before = available(ns, name, 3).await?;
    let old = before.status.clone().unwrap_or_default().update_revision;
    // A JSON patch, not get-then-replace: the controller writes status meanwhile, and a
    // replace carrying the old resourceVersion would fail with 409 Conflict.
    let image = "/spec/template/roles/0/workerTemplate/spec/containers/0/image";
    json_patch(
        ns,
        name,
        json!([{"op": "replace", "path": image, "value": "vllm/vllm-openai:v0.11.0"}]),
    )
    .await?;
    // Sample until every group is on the new revision and ready; at most one group
    // (maxUnavailable 1) may be unready at any sampled moment.
    let fewest = AtomicUsize::new(3);
    let (fewest, old) = (&fewest, &old);
    let done = eventually("all groups updated", || {
        let api = api.clone();
        async move {
            fewest.fetch_min(ready_groups(ns, name, 4).await?.len(), Ordering::Relaxed);
            let ms = api.get(name).await?;
            let st = ms.status.clone().unwrap_or_default();
            let done = st.updated_replicas == Some(3)
                && st.available_replicas == Some(3)
                && st.update_revision != *old
                && condition(&ms, "Available").as_deref() == Some("True");
            Ok(done.then_some(ms))
        }
    })
    .await?;
    let fewest = fewest.load(Ordering::Relaxed);
    assert!(
        fewest >= 2,
        "only {fewest} groups were ready at some moment"
    );
    let rev = done
        .status
        .unwrap_or_default()
        .update_revision
        .context("no revision")?;
    let lp = ListParams::default().labels(&format!("modelserving.volcano.sh/name={name}"));
    let pods = ns.api::<Pod>().list(&lp).await?.items;
    assert_eq!(pods.len(), 12);
    for p in &pods {
        assert_eq!(
            p.labels()["modelserving.volcano.sh/revision"],
            rev,
            "{}",
            p.name_any()
        );
    }
    // Only the ControllerRevision of the revision in use remains.
    let crs = eventually("old ControllerRevision deleted", || async {
        let list = ns
            .api::<ControllerRevision>()
            .list(&ListParams::default())
            .await?;
        let names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
        Ok((names.len() == 1).then_some(names))
    })
    .await?;
    assert_eq!(crs, [format!("{name}-{rev}")]);
    Ok(())
}

/// Deletes the ModelServing `sample` and its pods, then reads the binary's log up to the
/// debug line of the deletion: no `reconcile failed` WARN.
///
/// Regression: every deletion logged a WARN `reconcile failed error=tried to reconcile
/// object ModelServing.../sample that was not found in local store` (the deletions of its
/// pods, here made as the garbage collector makes them, trigger their owner's reconcile).
async fn deleting_logs_no_failure(
    ns: &TestNamespace,
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> Result<()> {
    ns.api::<ModelServing>()
        .delete("sample", &Default::default())
        .await?;
    let lp = ListParams::default().labels("modelserving.volcano.sh/name=sample");
    ns.api::<Pod>()
        .delete_collection(&Default::default(), &lp)
        .await?;
    let logged = tokio::time::timeout(WAIT, async {
        let mut before = Vec::new();
        while let Some(line) = lines.next_line().await? {
            if line.contains("deleted; nothing to reconcile") {
                return Ok::<_, anyhow::Error>((line, before));
            }
            before.push(line);
        }
        bail!("the binary exited before noticing the deletion")
    })
    .await??;
    assert!(logged.0.contains("DEBUG"), "{}", logged.0);
    let failed: Vec<_> = logged
        .1
        .iter()
        .filter(|l| l.contains("WARN") && l.contains("reconcile failed"))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    Ok(())
}

#[tokio::test]
async fn the_binary_serves_healthz_and_reconciles() -> Result<()> {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

    let ns = kthena_testenv::namespace("ctl-binary").await?;
    let bin = env!("CARGO_BIN_EXE_kthena-controller");
    let bad = tokio::process::Command::new(bin)
        .args(["--controllers", "*,-lws"])
        .output()
        .await?;
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains(r#"unknown controller "-lws" in --controllers"#),
        "{stderr}"
    );
    let bad = tokio::process::Command::new(bin)
        .args(["--webhook-timeout", "soon"])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && stderr.contains(r#"invalid duration "soon""#),
        "{stderr}"
    );

    let kubeconfig = ns.env().kubeconfig().to_owned();
    let mut child = tokio::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--namespace",
            ns.name(),
            "--healthz-bind-address",
            "127.0.0.1:0",
            "--port",
            "0",
            "--webhook-timeout",
            "30s",
            "--kube-api-qps",
            "50",
            "--kube-api-burst",
            "100",
            "--leader-elect",
            "--leader-elect-namespace",
            ns.name(),
        ])
        .env("RUST_LOG", "info,kthena_controller::serving=debug")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some((_, rest)) = line.split_once("addr=") {
                let addr = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                return Ok::<_, anyhow::Error>(addr);
            }
        }
        bail!("the binary exited before serving /healthz")
    })
    .await??;
    let mut conn = tokio::net::TcpStream::connect(&addr).await?;
    conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await?;
    assert!(
        reply.starts_with("HTTP/1.1 200 OK") && reply.ends_with("ok"),
        "{reply}"
    );

    create_example(&ns, "sample.yaml").await?;
    let want: Vec<String> = ["decode", "prefill"]
        .iter()
        .flat_map(|r| (0..4).map(move |i| format!("sample-0-{r}-0-{i}")))
        .collect();
    eventually("the binary creates the pods", || async {
        Ok((pod_names(&ns, "sample").await? == want).then_some(()))
    })
    .await?;
    deleting_logs_no_failure(&ns, &mut lines).await?;
    // Kubernetes stops a pod with SIGTERM: the binary exits 0 and releases the Lease at
    // once, so a standby need not wait for it to expire.
    let pid = child.id().context("no pid")?.to_string();
    let kill = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await?;
    assert!(kill.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await??;
    assert!(status.success(), "{status}");
    let lease = ns.api::<Lease>().get(LEASE_NAME).await?;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert_eq!(holder, "", "the Lease was not released");
    Ok(())
}

#[tokio::test]
async fn role_rolling_update_replaces_only_the_changed_role() -> Result<()> {
    let env_ = setup("ctl-role-rolling").await?;
    let ns = &env_.ns;
    create_example(ns, "role-rollingupdate.yaml").await?;
    let before = available(ns, "sample", 2).await?;
    let old = before.status.clone().unwrap_or_default().update_revision;
    let uids_before = uids(ns, "sample").await?;
    assert_eq!(uids_before.len(), 8);
    let api = ns.api::<ModelServing>();
    let image = "/spec/template/roles/1/workerTemplate/spec/containers/0/image";
    json_patch(
        ns,
        "sample",
        json!([{"op": "replace", "path": image, "value": "nginx:1.29"}]),
    )
    .await?;
    let done = eventually("both groups updated", || async {
        let ms = api.get("sample").await?;
        let st = ms.status.clone().unwrap_or_default();
        let now = uids(ns, "sample").await?;
        let decode_new = now
            .iter()
            .filter(|(n, _)| n.contains("-decode-"))
            .all(|(n, u)| uids_before.get(n) != Some(u));
        let done = st.updated_replicas == Some(2)
            && st.available_replicas == Some(2)
            && st.update_revision != old
            && now.len() == 8
            && decode_new;
        Ok(done.then_some(now))
    })
    .await?;
    // Prefill's template did not change: its pods were never replaced.
    for (pod, uid) in uids_before.iter().filter(|(n, _)| n.contains("-prefill-")) {
        assert_eq!(done.get(pod), Some(uid), "{pod} was replaced");
    }
    let ms = available(ns, "sample", 2).await?;
    assert_eq!(ms.status.unwrap_or_default().current_replicas, Some(2));
    Ok(())
}

#[tokio::test]
async fn a_role_replica_change_converges_deleting_in_gos_order() -> Result<()> {
    let env_ = setup("ctl-role-scale").await?;
    let ns = &env_.ns;
    create_example(ns, "multi-node.yaml").await?;
    let name = "llama-multinode";
    available(ns, name, 1).await?;
    let set_role_replicas = |n: i32| {
        let op = json!([{"op": "replace", "path": "/spec/template/roles/0/replicas", "value": n}]);
        json_patch(ns, name, op)
    };
    let before = uids(ns, name).await?;
    set_role_replicas(3).await?;
    let role_pods = |rs: &[u32]| -> Vec<String> {
        let mut v: Vec<String> = rs
            .iter()
            .flat_map(|r| (0..2).map(move |i| format!("{name}-0-llama-405b-{r}-{i}")))
            .collect();
        v.sort();
        v
    };
    eventually("role replica 2 created", || async {
        Ok((pod_names(ns, name).await? == role_pods(&[0, 1, 2])).then_some(()))
    })
    .await?;
    let ms = available(ns, name, 1).await?;
    // Scaling a role is not a template change: the other replicas were not touched.
    let now = uids(ns, name).await?;
    for (pod, uid) in &before {
        assert_eq!(now.get(pod), Some(uid), "{pod} was replaced");
    }
    assert_eq!(
        ms.status.unwrap_or_default().updated_replicas,
        Some(1),
        "no new revision"
    );
    // Replica 2 is expensive to delete: going to 1 deletes replicas 1 and 0.
    let cost =
        json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "100"}}});
    ns.api::<Pod>()
        .patch(
            &format!("{name}-0-llama-405b-2-0"),
            &PatchParams::default(),
            &Patch::Merge(&cost),
        )
        .await?;
    set_role_replicas(1).await?;
    // The pods and then the services of replicas 1 and 0 are deleted.
    let svc_names = || async {
        let svcs = ns.api::<Service>().list(&ListParams::default()).await?;
        anyhow::Ok(svcs.items.iter().map(|s| s.name_any()).collect::<Vec<_>>())
    };
    eventually("only role replica 2 left", || async {
        let pods = pod_names(ns, name).await? == role_pods(&[2]);
        let svcs = svc_names().await? == [format!("{name}-0-llama-405b-2-0")];
        Ok((pods && svcs).then_some(()))
    })
    .await?;
    available(ns, name, 1).await?;
    // Go's RoleDeleting event for each deleted role replica, on the ModelServing.
    let deleting =
        |r: u32| format!("Role llama-405b/llama-405b-{r} in ServingGroup {name}-0 is now Deleting");
    eventually("RoleDeleting events of replicas 1 and 0", || async {
        let list = ns.api::<K8sEvent>().list(&ListParams::default()).await?;
        let notes: BTreeSet<(String, String, String)> = list
            .items
            .iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ModelServing")
                    && e.reason.as_deref() == Some("RoleDeleting")
            })
            .map(|e| {
                let s = |v: &Option<String>| v.clone().unwrap_or_default();
                (s(&e.type_), s(&e.reason), s(&e.note))
            })
            .collect();
        let want: BTreeSet<_> = [1, 0]
            .map(|r| ("Normal".to_owned(), "RoleDeleting".to_owned(), deleting(r)))
            .into();
        Ok((notes == want).then_some(()))
    })
    .await?;
    Ok(())
}
