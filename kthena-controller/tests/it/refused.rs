//! A pod the API server refuses (here: the RuntimeClass admission plugin, for a worker
//! template naming a RuntimeClass that does not exist) is only created again, at the retry:
//! its role replica is not recovered as one that lost a pod, so the entry pod that exists is
//! never deleted; the ModelServing gets a `FailedCreate` Warning and its status, and once the
//! cause is gone the worker is created and the ModelServing becomes Available.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Result;
use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::api::node::v1::RuntimeClass;
use kthena_api::ModelServing;
use kthena_testenv::TestNamespace;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio::task::JoinSet;

use crate::ms_support::*;

/// One role `decode`, 1 replica of an entry pod and 1 worker whose template names the
/// RuntimeClass `runtime_class`, with `recoveryPolicy: policy`.
fn serving(ns: &str, name: &str, policy: &str, runtime_class: &str) -> Result<ModelServing> {
    let container = json!({"name": "engine", "image": "vllm/vllm-openai:latest",
        "command": ["sh", "-c", "python3 -m vllm.entrypoints.openai.api_server --model m"]});
    Ok(serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "recoveryPolicy": policy, "template": {"roles": [{
            "name": "decode",
            "replicas": 1,
            "workerReplicas": 1,
            "entryTemplate": {"spec": {"containers": [container]}},
            "workerTemplate": {"spec": {
                "runtimeClassName": runtime_class,
                "containers": [container],
            }},
        }]}},
    }))?)
}

/// The UIDs every pod of the namespace had so far, by name (from a watch started now, a
/// task of `tasks`).
fn record_pod_uids(
    ns: &TestNamespace,
    tasks: &mut JoinSet<()>,
) -> Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> {
    let seen = Arc::new(Mutex::new(BTreeMap::<String, BTreeSet<String>>::new()));
    let record = Arc::clone(&seen);
    let pods = watcher(ns.api::<Pod>(), watcher::Config::default()).applied_objects();
    tasks.spawn(async move {
        let mut pods = std::pin::pin!(pods);
        while let Some(pod) = pods.next().await {
            let Ok(pod) = pod else { continue };
            let mut seen = record.lock().unwrap_or_else(PoisonError::into_inner);
            let uids = seen.entry(pod.name_any()).or_default();
            uids.extend(pod.uid());
        }
    });
    seen
}

/// How many pods named `name` were created so far.
fn created(uids: &Mutex<BTreeMap<String, BTreeSet<String>>>, name: &str) -> usize {
    let uids = uids.lock().unwrap_or_else(PoisonError::into_inner);
    uids.get(name).map_or(0, BTreeSet::len)
}

/// The `FailedCreate` events on the ModelServing `ms`: (note, related pod, series count).
async fn failed_creates(
    ns: &TestNamespace,
    ms: &str,
) -> Result<Vec<(String, Option<String>, Option<i32>)>> {
    let events = ns.api::<K8sEvent>().list(&ListParams::default()).await?;
    Ok(events
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("FailedCreate")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(ms)
        })
        .map(|e| {
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            let related = e.related.as_ref().and_then(|r| r.name.clone());
            let count = e.series.as_ref().map(|s| s.count);
            (e.note.clone().unwrap_or_default(), related, count)
        })
        .collect())
}

/// Regression: the entry pod was created and deleted about 10 times a second (`RoleRecreate`
/// and `ServingGroupRecreate`) while the API server refused the worker pod: the missing
/// worker counted as lost, so the role replica was recovered, and the new entry pod's watch
/// event started the next attempt at once. Nothing said why on the ModelServing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_worker_pod_is_retried_without_recreating_its_entry_pod() -> Result<()> {
    let env_ = setup("refused").await?;
    let ns = &env_.ns;
    let runtime_class = format!("rc-{}", ns.name());
    let mut tasks = JoinSet::new();
    let uids = record_pod_uids(ns, &mut tasks);
    let api = ns.api::<ModelServing>();
    for (name, policy) in [("rr", "RoleRecreate"), ("sg", "ServingGroupRecreate")] {
        let ms = serving(ns.name(), name, policy, &runtime_class)?;
        api.create(&PostParams::default(), &ms).await?;
    }
    for ms in ["rr", "sg"] {
        let worker = format!("{ms}-0-decode-0-1");
        let events = eventually("a FailedCreate event", || async {
            let events = failed_creates(ns, ms).await?;
            Ok((!events.is_empty()).then_some(events))
        })
        .await?;
        let note = format!(
            "creating pod {worker}: pods \"{worker}\" is forbidden: pod rejected: RuntimeClass \"{runtime_class}\" not found (HTTP 403)"
        );
        assert_eq!(events, [(note, Some(worker), None)]);
        // The status is written although the reconcile fails.
        let st = eventually("the status written", || async {
            Ok(api.get(ms).await?.status.filter(|s| s.replicas == 1))
        })
        .await?;
        assert_eq!(st.available_replicas, Some(0));
    }
    // Longer than the 5 s retry: the worker is tried again, the entry pod stays.
    tokio::time::sleep(Duration::from_secs(7)).await;
    for ms in ["rr", "sg"] {
        assert_eq!(created(&uids, &format!("{ms}-0-decode-0-0")), 1, "{ms}");
        assert_eq!(created(&uids, &format!("{ms}-0-decode-0-1")), 0, "{ms}");
        // Published once, not once per retry (a repeat would be a series).
        let events = failed_creates(ns, ms).await?;
        assert_eq!(events.len(), 1, "{ms}: {events:?}");
        assert_eq!(events[0].2, None, "{ms}: {events:?}");
    }

    // The cause removed: the worker is created at the next retry, the entry pod kept.
    let rc: RuntimeClass = serde_json::from_value(json!({
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": runtime_class},
        "handler": "runc",
    }))?;
    let classes: Api<RuntimeClass> = Api::all(ns.client().clone());
    classes.create(&PostParams::default(), &rc).await?;
    let result = async {
        for ms in ["rr", "sg"] {
            available(ns, ms, 1).await?;
            assert_eq!(created(&uids, &format!("{ms}-0-decode-0-0")), 1, "{ms}");
            assert_eq!(created(&uids, &format!("{ms}-0-decode-0-1")), 1, "{ms}");
        }
        anyhow::Ok(())
    }
    .await;
    classes.delete(&runtime_class, &Default::default()).await?;
    result
}
