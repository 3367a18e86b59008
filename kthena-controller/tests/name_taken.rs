//! A child's name taken by an object the ModelServing does not own: the controller says so
//! (a Warning event and a log line) and creates the child soon after the object is removed.

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::ResourceExt as _;
use kube::api::{ListParams, PostParams};
use serde_json::json;

mod ms_support;
use ms_support::*;

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
