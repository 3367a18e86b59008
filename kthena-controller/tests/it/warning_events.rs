//! The Warning events of the ModelServing controller: a child's name taken by an object the
//! ModelServing does not own (the child is created soon after the object is removed), and a
//! ModelServing that breaks the webhook's rules because it got in without the webhook.

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::ResourceExt as _;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::ms_support::*;

/// Regression: a bare Pod holding the name of a group's entry pod made the group wait in
/// `Creating` with no word, and after the Pod was deleted the group's own pod came back only
/// at the next resync, 5 minutes later (or when something else changed).
#[tokio::test]
async fn a_taken_pod_name_is_reported_and_recovered_from() -> Result<()> {
    let env_ = setup("ctl-taken").await?;
    let ns = &env_.ns;
    let taken = "sample-0-prefill-0-0";
    let bare: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": taken, "namespace": ns.name()},
        "spec": {"containers": [{"name": "other", "image": "busybox"}]},
    }))?;
    ns.api::<Pod>()
        .create(&PostParams::default(), &bare)
        .await?;
    create_example(ns, "sample.yaml").await?;
    let note = eventually("a NameTaken event", || async {
        let events = ns.api::<K8sEvent>().list(&ListParams::default()).await?;
        Ok(events
            .items
            .iter()
            .find(|e| e.reason.as_deref() == Some("NameTaken"))
            .map(|e| {
                let kind = e.regarding.as_ref().and_then(|r| r.kind.clone());
                (kind, e.type_.clone(), e.note.clone().unwrap_or_default())
            }))
    })
    .await?;
    assert_eq!(
        note,
        (
            Some("ModelServing".to_owned()),
            Some("Warning".to_owned()),
            format!(
                "pod/{taken} exists and is not owned by this ModelServing; remove it so the group can start"
            )
        )
    );
    ns.api::<Pod>().delete(taken, &Default::default()).await?;
    // The group's own pod (with the ModelServing's labels) replaces it, within the retry of
    // a taken name (10 s) rather than the 5-minute resync (`eventually` gives up at 60 s).
    eventually("the group's own entry pod", || async {
        let pod = ns.api::<Pod>().get_opt(taken).await?;
        Ok(pod.filter(|p| p.labels().contains_key("modelserving.volcano.sh/name")))
    })
    .await?;
    available(ns, "sample", 1).await?;
    Ok(())
}

/// The `(type, note)` of the first event of `reason` on a ModelServing.
async fn event_note(ns: &kthena_testenv::TestNamespace, reason: &str) -> Result<(String, String)> {
    eventually(reason, || async {
        let events = ns.api::<K8sEvent>().list(&ListParams::default()).await?;
        Ok(events
            .items
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ModelServing")
            })
            .map(|e| {
                (
                    e.type_.clone().unwrap_or_default(),
                    e.note.clone().unwrap_or_default(),
                )
            }))
    })
    .await
}

/// Regression: a ModelServing created without the webhook (here none is installed) with
/// `workerReplicas: 2` and no `workerTemplate` got one pod and stayed `Progressing` for ever,
/// with nothing saying why.
#[tokio::test]
async fn a_model_serving_that_breaks_the_webhook_rules_gets_a_warning() -> Result<()> {
    let env_ = setup("ctl-invalid").await?;
    let ns = &env_.ns;
    let ms: kthena_api::ModelServing = serde_json::from_value(json!({
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "metadata": {"name": "bad1", "namespace": ns.name()},
        "spec": {"replicas": 1, "template": {"roles": [{
            "name": "a",
            "replicas": 1,
            "workerReplicas": 2,
            "entryTemplate": {"spec": {"containers": [{"name": "e", "image": "vllm"}]}},
        }]}},
    }))?;
    ns.api::<kthena_api::ModelServing>()
        .create(&PostParams::default(), &ms)
        .await?;
    let (type_, note) = event_note(ns, "InvalidSpec").await?;
    assert_eq!(type_, "Warning");
    assert_eq!(
        note,
        "validation failed:\n  - spec.template.roles[0].workerTemplate: workerTemplate is required when workerReplicas > 0"
    );
    Ok(())
}
